// The active device and its registration as ExecuTorch's CUDA allocator; see device.h.
#include "device.h"

#include <executorch/runtime/core/device_allocator.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace tte {
namespace {

using executorch::runtime::DeviceAllocator;
using executorch::runtime::etensor::DeviceIndex;
using executorch::runtime::etensor::DeviceType;

// ExecuTorch's view of the active device: its planned device arenas are allocated here, and its
// `et_copy` kernels move user inputs and outputs through it.
class ExecuTorchAllocator final : public DeviceAllocator {
 public:
  explicit ExecuTorchAllocator(Device& d) : device_(d) {}
  Result<void*> allocate(size_t nbytes, DeviceIndex, size_t alignment) override {
    return device_.allocate(nbytes);  // both devices align to at least 256 bytes
  }
  void deallocate(void* ptr, DeviceIndex) override { device_.deallocate(ptr); }
  Error copy_host_to_device(void* dst, const void* src, size_t n, DeviceIndex) override {
    return device_.to_device(dst, src, n);
  }
  Error copy_device_to_host(void* dst, const void* src, size_t n, DeviceIndex) override {
    return device_.to_host(dst, src, n);
  }
  DeviceType device_type() const override { return DeviceType::CUDA; }

 private:
  Device& device_;
};

std::atomic<Device*> g_active{nullptr};
std::mutex g_activate;

}  // namespace

Device* active_device() noexcept { return g_active.load(std::memory_order_acquire); }

Error activate(Device& device) noexcept {
  std::lock_guard<std::mutex> lock(g_activate);
  Device* current = g_active.load(std::memory_order_acquire);
  if (current == &device) return Error::Ok;
  if (current != nullptr) return Error::InvalidState;
  // ExecuTorch aborts on a second registration for a device type: only the first activation
  // registers, and there is only ever one.
  static ExecuTorchAllocator* allocator = new ExecuTorchAllocator(device);
  executorch::runtime::register_device_allocator(allocator);
  g_active.store(&device, std::memory_order_release);
  return Error::Ok;
}

Error copy_any(void* dst, const void* src, size_t nbytes) noexcept {
  if (nbytes == 0 || dst == src) return Error::Ok;
  Device* d = active_device();
  const bool dst_dev = d != nullptr && d->owns(dst);
  const bool src_dev = d != nullptr && d->owns(src);
  if (dst_dev && src_dev) return d->device_copy(dst, src, nbytes);
  if (dst_dev) return d->to_device(dst, src, nbytes);
  if (src_dev) return d->to_host(dst, src, nbytes);
  std::memmove(dst, src, nbytes);
  return Error::Ok;
}

}  // namespace tte
