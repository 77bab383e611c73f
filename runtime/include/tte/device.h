// Device memory for applications that load `.pte` files with this runtime (docs/CONTRACTS.md §5).
//
// Invariant: the process has at most one device, chosen once with `use_device` before a program
// with device arenas is loaded; it is ExecuTorch's CUDA `DeviceAllocator` from then on (device
// arenas, `et_copy` kernels) and the delegate's device. A program loaded through `device_aware`
// gets the initial values of state that lives in device memory copied in through the device —
// never written into a device pointer by host code (ExecuTorch's loaders would `pread`/`memcpy`).
#pragma once

#include <executorch/runtime/core/data_loader.h>

#include <memory>
#include <string>

namespace tte {

// "cuda" (device 0: refused without CUDA in this build or without a GPU), "emulated" (device
// memory the host cannot touch, for CPU CI), "auto" (cuda when there is one, else none) or
// "none". 0 when in force, else an ExecuTorch error code with the reason in `why`.
int use_device(const char* kind, std::string& why) noexcept;

// Orders every copy of the device in force, and every engine enqueue of this runtime's
// delegates, on the caller's `stream` (a cudaStream_t; nullptr: the default stream again). 0 when
// in force; refused without a device. The emulated device accepts it and stays synchronous.
int use_stream(void* stream, std::string& why) noexcept;

// A new non-blocking stream of the device in force (a cudaStream_t, not ordered with the default
// stream: what an application pipelining its own GPU work holds), or nullptr with `why` (no
// device, or the emulated device, which has no streams).
void* new_stream(std::string& why) noexcept;

// The device in force ("cuda:0", "emulated"), or "" when none.
const char* device_name() noexcept;

// `inner`, except that a segment loaded into device memory is read on the host and copied in
// through the device.
std::unique_ptr<executorch::runtime::DataLoader> device_aware(
    std::unique_ptr<executorch::runtime::DataLoader> inner);

}  // namespace tte
