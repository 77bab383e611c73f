// One kernel launch copies up to kMaxRanges device ranges (cuda_batch_copy.h).
//
// Invariant: the ranges travel by value in the kernel's parameters (no descriptor table in device
// memory, nothing to upload or keep in sync when addresses change); block row y copies range y,
// 16 bytes a thread where the range's addresses and size allow it, byte by byte otherwise.
#include "cuda_batch_copy.h"

#include <cstdint>

namespace tte {
namespace {

struct Ranges {
  CopyRange r[kMaxRanges];
};

__global__ void copy_ranges(Ranges batch) {
  const CopyRange c = batch.r[blockIdx.y];
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool wide =
      ((reinterpret_cast<uintptr_t>(c.dst) | reinterpret_cast<uintptr_t>(c.src) | c.nbytes) &
       15u) == 0;
  if (wide) {
    uint4* d = static_cast<uint4*>(c.dst);
    const uint4* s = static_cast<const uint4*>(c.src);
    for (size_t i = first; i < c.nbytes / 16; i += stride) d[i] = s[i];
    return;
  }
  char* d = static_cast<char*>(c.dst);
  const char* s = static_cast<const char*>(c.src);
  for (size_t i = first; i < c.nbytes; i += stride) d[i] = s[i];
}

}  // namespace

cudaError_t launch_copy_ranges(const CopyRange* copies, size_t n, cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  for (size_t at = 0; at < n; at += kMaxRanges) {
    const size_t m = n - at < kMaxRanges ? n - at : kMaxRanges;
    Ranges batch{};
    size_t widest = 0;
    for (size_t i = 0; i < m; ++i) {
      batch.r[i] = copies[at + i];
      widest = batch.r[i].nbytes > widest ? batch.r[i].nbytes : widest;
    }
    // enough blocks per range for its 16-byte lanes, at most 64: a grid-stride loop does the rest
    size_t blocks = (widest / 16 + kThreads - 1) / kThreads;
    blocks = blocks < 1 ? 1 : blocks > 64 ? 64 : blocks;
    copy_ranges<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(m)), kThreads, 0,
                  stream>>>(batch);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace tte
