// Times one decode step's copy-back on the GPU, the ways it can be done, in one run (issue 35).
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

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "qwen3next";
  const int reps = argc > 2 ? std::atoi(argv[2]) : 100;
  const std::vector<size_t> sizes = sizes_for(what);
  tte::Device* dev = tte::cuda_device();
  if (dev == nullptr) {
    std::fprintf(stderr, "no CUDA device\n");
    return 2;
  }
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (dev->set_stream(s) != tte::Error::Ok) return 1;
  size_t total = 0;
  std::vector<tte::CopyRange> ranges;
  std::vector<char*> host_state, host_tmp, pinned_state, pinned_tmp;
  for (size_t n : sizes) {
    auto state = dev->allocate(n);
    auto scratch = dev->allocate(n);
    if (!state.ok() || !scratch.ok()) return 1;
    CHECK_CUDA(cudaMemsetAsync(scratch.get(), 1, n, s));
    ranges.push_back({state.get(), scratch.get(), n});
    host_state.push_back(static_cast<char*>(std::malloc(n)));
    host_tmp.push_back(static_cast<char*>(std::malloc(n)));
    char *ps, *pt;
    CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&ps), n));
    CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&pt), n));
    pinned_state.push_back(ps);
    pinned_tmp.push_back(pt);
    total += n;
  }
  void *flat_dst, *flat_src;
  CHECK_CUDA(cudaMalloc(&flat_dst, total));
  CHECK_CUDA(cudaMalloc(&flat_src, total));
  auto report = [&](const char* way, float us) {
    std::printf("%s per_step_us=%.2f bytes=%zu copies=%zu\n", way, us, total, sizes.size());
  };
  report("batched", time_steps(s, reps, [&] {
           if (dev->device_copy_batch(ranges.data(), ranges.size()) != tte::Error::Ok) std::exit(1);
         }));
  report("per_buffer", time_steps(s, reps, [&] {
           for (const auto& r : ranges) {
             if (dev->device_copy(r.dst, r.src, r.nbytes) != tte::Error::Ok) std::exit(1);
           }
         }));
  report("flat", time_steps(s, reps, [&] {
           CHECK_CUDA(cudaMemcpyAsync(flat_dst, flat_src, total, cudaMemcpyDeviceToDevice, s));
         }));
  auto upstream = [&](std::vector<char*>& state, std::vector<char*>& tmp) {
    for (size_t i = 0; i < ranges.size(); ++i) {  // stage in, (engine), fetch, write back
      CHECK_CUDA(cudaMemcpyAsync(ranges[i].dst, state[i], sizes[i], cudaMemcpyHostToDevice, s));
      CHECK_CUDA(cudaMemcpyAsync(tmp[i], ranges[i].src, sizes[i], cudaMemcpyDeviceToHost, s));
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (size_t i = 0; i < ranges.size(); ++i) std::memcpy(state[i], tmp[i], sizes[i]);
  };
  report("upstream_pageable",
         time_steps(s, std::max(reps / 5, 5), [&] { upstream(host_state, host_tmp); }));
  report("upstream_pinned",
         time_steps(s, std::max(reps / 5, 5), [&] { upstream(pinned_state, pinned_tmp); }));
  // the batched copy really copies: every state buffer now holds its scratch's bytes
  CHECK_CUDA(cudaMemsetAsync(ranges[0].dst, 0, sizes[0], s));
  if (dev->device_copy_batch(ranges.data(), ranges.size()) != tte::Error::Ok) return 1;
  std::vector<char> back(sizes[0]);
  CHECK_CUDA(cudaMemcpyAsync(back.data(), ranges[0].dst, sizes[0], cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (char c : back) {
    if (c != 1) {
      std::fprintf(stderr, "batched copy left wrong bytes\n");
      return 1;
    }
  }
  std::printf("checked: the batched copy wrote every byte of buffer 0\n");
  return 0;
}
