// Device memory as the runtime sees it: the process's one device (a CUDA GPU, or the emulated
// device CPU CI runs on), ExecuTorch's allocator for `DeviceType::CUDA`, and the only way bytes
// move into, out of and within device memory.
//
// Invariant: host code never dereferences an address `owns` answers true for. Every byte in or out
// of device memory goes through `to_device` / `to_host` / `device_copy` (ExecuTorch's own device
// arenas and copy kernels included: `activate` registers the device as ExecuTorch's CUDA
// `DeviceAllocator`). At most one device is active per process, chosen once (`activate`), before
// any program with device arenas is loaded; it lives as long as the process. On the emulated
// device a host touch of device memory faults and is reported naming the allocation (so CPU CI
// fails where a GPU would crash); on CUDA it is a real device pointer.
#pragma once

#include "common.h"

#include <cstddef>
#include <cstdint>

namespace tte {

// One copy of a batch: `nbytes` from `src` to `dst`.
struct CopyRange {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t nbytes = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const char* name() const = 0;  // "cuda:0", "emulated"
  // Device memory of at least `nbytes` (an empty request gets a valid, distinct address).
  virtual Result<void*> allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  // Whether `ptr` lies in this device's memory (never dereferences it).
  virtual bool owns(const void* ptr) const = 0;
  ET_NODISCARD virtual Error to_device(void* dst, const void* src, size_t nbytes) = 0;
  ET_NODISCARD virtual Error to_host(void* dst, const void* src, size_t nbytes) = 0;
  ET_NODISCARD virtual Error device_copy(void* dst, const void* src, size_t nbytes) = 0;
  // `n` copies within device memory as one device operation on the stream, like `device_copy`
  // each (enqueued only). The ranges must not overlap one another (the caller checks); the order
  // among them is unspecified. The CUDA device launches one copy kernel per up to 64 ranges;
  // this default (the emulated device's) makes the copies one by one.
  ET_NODISCARD virtual Error device_copy_batch(const CopyRange* copies, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (Error e = device_copy(copies[i].dst, copies[i].src, copies[i].nbytes); e != Error::Ok) {
        return e;
      }
    }
    return Error::Ok;
  }
  // The stream every copy above (and every engine enqueue, tensorrt_engine.cpp) is ordered on:
  // the caller's once `set_stream` named one, else the device's default. `to_device`/`to_host`
  // return once the host side may be reused/read; `device_copy` only enqueues. The emulated
  // device has no streams: it accepts a stream and stays synchronous.
  ET_NODISCARD virtual Error set_stream(void* stream) {
    stream_ = stream;
    return Error::Ok;
  }
  void* stream() const { return stream_; }
  // A new non-blocking stream (the caller owns it); NotSupported where there are none.
  virtual Result<void*> create_stream() { return Error::NotSupported; }

 protected:
  void* stream_ = nullptr;
};

// The active device, or nullptr (host memory only).
Device* active_device() noexcept;

// Makes `device` (static lifetime) the process's device and registers it as ExecuTorch's CUDA
// allocator. Error::InvalidState when another device is already active (activating the same one
// again is Ok).
ET_NODISCARD Error activate(Device& device) noexcept;

// The emulated device: each allocation is one memfd mapped twice — the address handed out (the
// "device pointer") with no access, and a private read-write view only this device's copy
// functions use. A host read or write of a device pointer raises SIGSEGV, which is reported on
// stderr ("tte emulated device: host code touched device memory at ...", naming the allocation)
// before the process dies of it.
Device& emulated_device();

// The CUDA runtime's device 0 (cudaMalloc / cudaMemcpy), or nullptr when the runtime was built
// without CUDA or no GPU is visible.
Device* cuda_device();

// Copies `nbytes` between any two addresses, host or device, through the active device where
// either side is device memory (a plain memmove when both are host memory).
ET_NODISCARD Error copy_any(void* dst, const void* src, size_t nbytes) noexcept;

}  // namespace tte
