// The CUDA device of device.h: device 0 through the CUDA runtime (built when CUDA is found).
//
// Invariant: allocations are cudaMalloc'd; copies are synchronous cudaMemcpy calls of the
// direction named (the reference engine's device mode and ExecuTorch's copy kernels are
// synchronous by contract); `owns` asks cudaPointerGetAttributes and never dereferences.
#include "device.h"

#include <cuda_runtime_api.h>

namespace tte {
namespace {

Error status(cudaError_t e) { return e == cudaSuccess ? Error::Ok : Error::Internal; }

class CudaDevice final : public Device {
 public:
  const char* name() const override { return "cuda:0"; }

  Result<void*> allocate(size_t nbytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, nbytes == 0 ? 1 : nbytes) != cudaSuccess) {
      return Error::MemoryAllocationFailed;
    }
    return p;
  }

  void deallocate(void* ptr) override { (void)cudaFree(ptr); }

  bool owns(const void* ptr) const override {
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
      (void)cudaGetLastError();  // a host pointer unknown to CUDA: clear the sticky-free error
      return false;
    }
    return attr.type == cudaMemoryTypeDevice;
  }

  Error to_device(void* dst, const void* src, size_t n) override {
    return status(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
  }
  Error to_host(void* dst, const void* src, size_t n) override {
    return status(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
  }
  Error device_copy(void* dst, const void* src, size_t n) override {
    return status(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice));
  }
};

}  // namespace

Device* cuda_device() {
  static CudaDevice* d = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      (void)cudaGetLastError();
      return static_cast<CudaDevice*>(nullptr);
    }
    return new CudaDevice();
  }();
  return d;
}

}  // namespace tte
