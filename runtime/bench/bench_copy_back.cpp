// Times one decode step's copy-back on the GPU, the ways it can be done, in one run.
// Usage: tte_bench_copy_back [qwen3next|demo|SIZE,SIZE,...] [REPETITIONS]
// Prints one line per way: `<way> per_step_us=<float> bytes=<int> copies=<int>`:
//   batched      the runtime's copy-back step: Device::device_copy_batch (one kernel launch per
//                64 buffers: the engine's scratch -> each state buffer)
//   per_buffer   one Device::device_copy (cudaMemcpyAsync D2D) per buffer: the runtime before
//   flat         one cudaMemcpyAsync of all the bytes, contiguous: the bandwidth limit
//   upstream_pageable / upstream_pinned  torch-tensorrt 2.14.0's pattern through ExecuTorch's
//                host write-back: stage the state host->device, fetch the new value
//                device->host, copy it into the host state (pageable or pinned host memory)
// Times are CUDA events around REPETITIONS steps on one stream, after a warm-up; never a gate.
#include "device.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

#define CHECK_CUDA(x)                                                      \
  do {                                                                     \
    cudaError_t e_ = (x);                                                  \
    if (e_ != cudaSuccess) {                                               \
      std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

// Qwen3-Next-80B-A3B's Gated DeltaNet stack: 36 layers, recurrent [1,32,128,128] fp32 and conv
// [1,8192,3] fp32 each.
std::vector<size_t> sizes_for(const std::string& what) {
  std::vector<size_t> out;
  if (what == "qwen3next") {
    for (int l = 0; l < 36; ++l) {
      out.push_back(size_t(32) * 128 * 128 * 4);
      out.push_back(size_t(8192) * 3 * 4);
    }
  } else if (what == "demo") {  // the demo decoder's copy-back buffers (demo --json)
    out = {768, 8};
  } else {
    for (size_t at = 0; at < what.size();) {
      size_t end = what.find(',', at);
      if (end == std::string::npos) end = what.size();
      out.push_back(std::stoull(what.substr(at, end - at)));
      at = end + 1;
    }
  }
  return out;
}

template <typename Step>
float time_steps(cudaStream_t s, int reps, Step step) {
  for (int i = 0; i < 3; ++i) step();
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  CHECK_CUDA(cudaEventRecord(a, s));
  for (int i = 0; i < reps; ++i) step();
  CHECK_CUDA(cudaEventRecord(b, s));
  CHECK_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  return ms * 1000.0f / reps;
}

// Each buffer of one step's copy-back: its state and scratch on the device, and the host copies
// upstream's pattern stages through (pageable and pinned).
struct Step {
  std::vector<size_t> sizes;
  size_t total = 0;
  std::vector<tte::CopyRange> ranges;
  std::vector<char*> host_state, host_tmp, pinned_state, pinned_tmp;
  void *flat_dst = nullptr, *flat_src = nullptr;
};

bool allocate(tte::Device* dev, cudaStream_t s, Step& st) {
  for (size_t n : st.sizes) {
    auto state = dev->allocate(n);
    auto scratch = dev->allocate(n);
    if (!state.ok() || !scratch.ok()) return false;
    CHECK_CUDA(cudaMemsetAsync(scratch.get(), 1, n, s));
    st.ranges.push_back({state.get(), scratch.get(), n});
    st.host_state.push_back(static_cast<char*>(std::malloc(n)));
    st.host_tmp.push_back(static_cast<char*>(std::malloc(n)));
    char *ps, *pt;
    CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&ps), n));
    CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&pt), n));
    st.pinned_state.push_back(ps);
    st.pinned_tmp.push_back(pt);
    st.total += n;
  }
  CHECK_CUDA(cudaMalloc(&st.flat_dst, st.total));
  CHECK_CUDA(cudaMalloc(&st.flat_src, st.total));
  return true;
}

// upstream 2.14.0's pattern per buffer: stage in, (engine), fetch, write back on the host
void upstream_step(cudaStream_t s, Step& st, std::vector<char*>& state, std::vector<char*>& tmp) {
  for (size_t i = 0; i < st.ranges.size(); ++i) {
    CHECK_CUDA(cudaMemcpyAsync(st.ranges[i].dst, state[i], st.sizes[i], cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaMemcpyAsync(tmp[i], st.ranges[i].src, st.sizes[i], cudaMemcpyDeviceToHost, s));
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (size_t i = 0; i < st.ranges.size(); ++i) std::memcpy(state[i], tmp[i], st.sizes[i]);
}

void time_every_way(tte::Device* dev, cudaStream_t s, int reps, Step& st) {
  auto report = [&](const char* way, float us) {
    std::printf("%s per_step_us=%.2f bytes=%zu copies=%zu\n", way, us, st.total, st.sizes.size());
  };
  report("batched", time_steps(s, reps, [&] {
           if (dev->device_copy_batch(st.ranges.data(), st.ranges.size()) != tte::Error::Ok) {
             std::exit(1);
           }
         }));
  report("per_buffer", time_steps(s, reps, [&] {
           for (const auto& r : st.ranges) {
             if (dev->device_copy(r.dst, r.src, r.nbytes) != tte::Error::Ok) std::exit(1);
           }
         }));
  report("flat", time_steps(s, reps, [&] {
           CHECK_CUDA(
               cudaMemcpyAsync(st.flat_dst, st.flat_src, st.total, cudaMemcpyDeviceToDevice, s));
         }));
  const int few = std::max(reps / 5, 5);
  report("upstream_pageable",
         time_steps(s, few, [&] { upstream_step(s, st, st.host_state, st.host_tmp); }));
  report("upstream_pinned",
         time_steps(s, few, [&] { upstream_step(s, st, st.pinned_state, st.pinned_tmp); }));
}

// The batched copy really copies: every byte of every buffer holds its scratch's bytes after
// one batched step (each scratch a byte of its own, each buffer zeroed first).
bool batch_wrote_every_byte(tte::Device* dev, cudaStream_t s, Step& st) {
  for (size_t i = 0; i < st.ranges.size(); ++i) {
    CHECK_CUDA(
        cudaMemsetAsync(const_cast<void*>(st.ranges[i].src), int(1 + i % 251), st.sizes[i], s));
    CHECK_CUDA(cudaMemsetAsync(st.ranges[i].dst, 0, st.sizes[i], s));
  }
  if (dev->device_copy_batch(st.ranges.data(), st.ranges.size()) != tte::Error::Ok) return false;
  for (size_t i = 0; i < st.ranges.size(); ++i) {
    const auto want = static_cast<unsigned char>(1 + i % 251);
    std::vector<unsigned char> back(st.sizes[i]);
    CHECK_CUDA(
        cudaMemcpyAsync(back.data(), st.ranges[i].dst, st.sizes[i], cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (unsigned char c : back) {
      if (c != want) return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "qwen3next";
  const int reps = argc > 2 ? std::atoi(argv[2]) : 100;
  tte::Device* dev = tte::cuda_device();
  if (dev == nullptr) {
    std::fprintf(stderr, "no CUDA device\n");
    return 2;
  }
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (dev->set_stream(s) != tte::Error::Ok) return 1;
  Step st;
  st.sizes = sizes_for(what);
  if (!allocate(dev, s, st)) return 1;
  time_every_way(dev, s, reps, st);
  if (!batch_wrote_every_byte(dev, s, st)) {
    std::fprintf(stderr, "batched copy left wrong bytes\n");
    return 1;
  }
  std::printf(
      "checked: the batched copy wrote every byte of every buffer (%zu buffers, %zu bytes)\n",
      st.sizes.size(), st.total);
  return 0;
}
