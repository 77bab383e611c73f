// The CUDA device's batched copy: many device-to-device ranges in one kernel launch.
#pragma once

#include "device.h"

#include <cuda_runtime_api.h>

namespace tte {

// Ranges per launch (they travel in the kernel's parameters: 64 x 24 bytes, under CUDA's 4 KiB).
constexpr size_t kMaxRanges = 64;

// Enqueues the `n` copies on `stream`: one launch per kMaxRanges ranges. The ranges must not
// overlap. The launch's error, if any (the copies themselves report asynchronously).
cudaError_t launch_copy_ranges(const CopyRange* copies, size_t n, cudaStream_t stream);

}  // namespace tte
