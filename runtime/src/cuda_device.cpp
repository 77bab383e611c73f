// The CUDA device of device.h: device 0 through the CUDA runtime (built when CUDA is found).
//
// Invariant: allocations are cudaMalloc'd; every copy is enqueued on the device's stream (the
// caller's after `set_stream`, else the legacy default stream), and a copy touching host memory
// waits for that stream before it returns (ExecuTorch's copy kernels and the reference engine's
// device mode read or reuse the host side right after); `owns` asks cudaPointerGetAttributes and
// never dereferences. A batch of device copies is one kernel launch where the runtime was built
// with CUDA kernels (nvcc found: cuda_batch_copy.cu), else one cudaMemcpyAsync per copy.
#include "device.h"

#include <cuda_runtime_api.h>
#ifdef TTE_HAVE_CUDA_KERNELS
#include "cuda_batch_copy.h"
#endif

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

  Result<void*> create_stream() override {
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
      return Error::Internal;
    }
    return static_cast<void*>(s);
  }

  Error to_device(void* dst, const void* src, size_t n) override {
    return waited(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s()));
  }
  Error to_host(void* dst, const void* src, size_t n) override {
    return waited(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s()));
  }
  Error device_copy(void* dst, const void* src, size_t n) override {
    return status(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s()));
  }
#ifdef TTE_HAVE_CUDA_KERNELS
  Error device_copy_batch(const CopyRange* copies, size_t n) override {
    return status(launch_copy_ranges(copies, n, s()));
  }
#endif

 private:
  cudaStream_t s() const { return static_cast<cudaStream_t>(stream_); }
  Error waited(cudaError_t e) const {
    return e == cudaSuccess ? status(cudaStreamSynchronize(s())) : status(e);
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
