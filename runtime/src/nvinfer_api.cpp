// TrtApi over nvinfer1 and the CUDA runtime (trt_api.h): the only file that includes TensorRT's
// headers. Built with whichever SDK the runtime found — TensorRT (TENSORRT_ROOT) or, with
// TTE_TENSORRT_SDK_RTX, TensorRT-RTX (TENSORRT_RTX_ROOT); both ship nvinfer1's API, so one source
// serves both. Compiled only with an SDK found (TTE_HAVE_TENSORRT).
#include "trt_api.h"

#include "blob.h"
#include "device.h"
#include "dtype.h"
#include "shared_plans.h"

#include <NvInferRuntime.h>
#include <NvInferVersion.h>
#include <cuda_runtime_api.h>

#include <executorch/runtime/platform/log.h>
#ifdef TTE_HAVE_CUDA_KERNELS
#include "cuda_batch_copy.h"
#endif

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tte {
namespace {

#if defined(TTE_TENSORRT_SDK_RTX)
constexpr const char* kSdk = "TensorRT-RTX";
#else
constexpr const char* kSdk = "TensorRT";
#endif

class Logger final : public nvinfer1::ILogger {
 public:
  void log(Severity severity, nvinfer1::AsciiChar const* msg) noexcept override {
    if (severity <= Severity::kERROR) {
      ET_LOG(Error, "%s: %s", kSdk, msg);
    } else if (severity == Severity::kWARNING) {
      ET_LOG(Info, "%s warning: %s", kSdk, msg);
    }
  }
};

Logger& logger() {
  static Logger* l = new Logger();
  return *l;
}

// The table's TensorRT numbering is nvinfer1's (dtype.h).
static_assert(static_cast<int32_t>(nvinfer1::DataType::kFLOAT) == trt_type::kFloat &&
                  static_cast<int32_t>(nvinfer1::DataType::kHALF) == trt_type::kHalf &&
                  static_cast<int32_t>(nvinfer1::DataType::kINT8) == trt_type::kInt8 &&
                  static_cast<int32_t>(nvinfer1::DataType::kINT32) == trt_type::kInt32 &&
                  static_cast<int32_t>(nvinfer1::DataType::kBOOL) == trt_type::kBool &&
                  static_cast<int32_t>(nvinfer1::DataType::kUINT8) == trt_type::kUInt8 &&
                  static_cast<int32_t>(nvinfer1::DataType::kBF16) == trt_type::kBF16 &&
                  static_cast<int32_t>(nvinfer1::DataType::kINT64) == trt_type::kInt64,
              "dtype.cpp's TensorRT column must use nvinfer1::DataType's values");

// ICudaEngine::getAliasedInputTensor (TensorRT 10.15+, TensorRT-RTX 1.6): gated on the header
// declaring it — a compile-time gate that holds for both SDKs, whose version macros differ.
template <class E, class = void>
struct HasAliasQuery : std::false_type {};
template <class E>
struct HasAliasQuery<E, std::void_t<decltype(std::declval<const E&>().getAliasedInputTensor(""))>>
    : std::true_type {};

// In a template, so the branch an older header cannot compile is discarded, not instantiated.
template <class E>
TrtAlias query_alias(const E& engine, const char* output) {
  if constexpr (HasAliasQuery<E>::value) {
    return TrtAlias{true, engine.getAliasedInputTensor(output)};
  } else {
    return TrtAlias{};
  }
}

// The engine's device current for a scope, the caller's current device restored at its end (the
// caller may be driving another GPU; every call leaves its choice as it found it).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    ok_ = cudaGetDevice(&previous_) == cudaSuccess;
    if (ok_ && previous_ != device) {
      ok_ = cudaSetDevice(device) == cudaSuccess;
      switched_ = ok_;
    }
  }
  ~DeviceScope() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  bool ok() const { return ok_; }

 private:
  int previous_ = 0;
  bool ok_ = false;
  bool switched_ = false;
};

nvinfer1::Dims to_nv(const TrtDims& d) {
  nvinfer1::Dims n{};
  n.nbDims = d.nb;
  for (int32_t i = 0; i < d.nb && i < nvinfer1::Dims::MAX_DIMS; ++i) n.d[i] = d.d[i];
  return n;
}

TrtDims from_nv(const nvinfer1::Dims& n) {
  TrtDims d;
  d.nb = n.nbDims;
  for (int32_t i = 0; i < n.nbDims && i < 8; ++i) d.d[i] = n.d[i];
  return d;
}

template <class T>
struct Deleter {
  void operator()(T* p) const { delete p; }
};

// One deserialized plan: what every engine of a program that names its key shares.
struct NvPlan {
  int device = 0;
  std::unique_ptr<nvinfer1::IRuntime, Deleter<nvinfer1::IRuntime>> runtime;
  std::unique_ptr<nvinfer1::ICudaEngine, Deleter<nvinfer1::ICudaEngine>> engine;
  ~NvPlan() {
    DeviceScope scope(device);
    engine.reset();
    runtime.reset();
  }
};

// `n` bytes of a plan deserialized on `device` (made current for it).
Result<PlanHandle> deserialize(int device, const std::string& sdk, const void* bytes, size_t n,
                               Reason& why) {
  DeviceScope scope(device);
  auto plan = std::make_shared<NvPlan>();
  plan->device = device;
  plan->runtime.reset(nvinfer1::createInferRuntime(logger()));
  if (!plan->runtime) {
    return why.fail(Error::InvalidState, "tensorrt.runtime", "nvinfer1::createInferRuntime failed");
  }
  plan->engine.reset(plan->runtime->deserializeCudaEngine(bytes, n));
  if (!plan->engine) {
    return why.fail(Error::DelegateInvalidCompatibility, "tensorrt.deserialize",
                    format("%s could not deserialize the %zu-byte engine (built for another "
                           "version or GPU? see the error above)",
                           sdk.c_str(), n));
  }
  return PlanHandle(std::move(plan));
}

class NvInferApi final : public TrtApi {
 public:
  explicit NvInferApi(int device) : device_(device) {
    sdk_ = std::string(kSdk) + " " + std::to_string(NV_TENSORRT_MAJOR) + "." +
           std::to_string(NV_TENSORRT_MINOR);
  }
  ~NvInferApi() override {
    DeviceScope scope(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    for (void* p : allocations_) cudaFree(p);
    context_.reset();
    plan_.reset();  // the engine, when this was its last holder
    if (stream_) cudaStreamDestroy(stream_);
  }

  Error open(const BlobInfo& info, Reason& why) {
    DeviceScope scope(device_);
    if (!scope.ok()) {
      return why.fail(Error::DelegateInvalidCompatibility, "tensorrt.device",
                      format("cannot make CUDA device %d (the blob's device_id) current", device_));
    }
#if defined(TTE_TENSORRT_SDK_RTX)
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device_) != cudaSuccess) {
      return why.fail(Error::DelegateInvalidCompatibility, "tensorrt.device",
                      format("cannot read the properties of CUDA device %d", device_));
    }
    if (Error e = check_rtx_device(device_, prop.major, prop.minor, why); e != Error::Ok) return e;
#endif
    const int device = device_;
    const std::string sdk = sdk_;
    auto plan = shared_plan(
        info,
        [device, &sdk](const void* bytes, size_t n, Reason& w) {
          return deserialize(device, sdk, bytes, n, w);
        },
        why);
    if (!plan.ok()) return plan.error();
    plan_ = plan.get();
    engine_ = static_cast<NvPlan*>(plan_.get())->engine.get();
    // Blocking (plain cudaStreamCreate): ordered with the legacy default stream, where other
    // producers of the caller's inputs may have written them.
    const cudaError_t ce = cudaStreamCreate(&stream_);
    if (ce != cudaSuccess) {
      return why.fail(Error::InvalidState, "tensorrt.stream",
                      format("cudaStreamCreate failed: %s", cudaGetErrorString(ce)));
    }
    return Error::Ok;
  }

  const char* sdk() const override { return sdk_.c_str(); }
  int32_t io_count() const override { return engine_->getNbIOTensors(); }
  TrtIo io_mode(const char* name) const override {
    switch (engine_->getTensorIOMode(name)) {
      case nvinfer1::TensorIOMode::kINPUT: return TrtIo::Input;
      case nvinfer1::TensorIOMode::kOUTPUT: return TrtIo::Output;
      default: return TrtIo::None;
    }
  }
  int32_t data_type(const char* name) const override {
    return static_cast<int32_t>(engine_->getTensorDataType(name));
  }
  bool host_input(const char* name) const override { return engine_->isShapeInferenceIO(name); }
  bool linear(const char* name) const override {
    return engine_->getTensorFormat(name) == nvinfer1::TensorFormat::kLINEAR;
  }
  TrtDims engine_shape(const char* name) const override {
    return from_nv(engine_->getTensorShape(name));
  }
  TrtAlias aliased_input(const char* output) const override {
    return query_alias(*engine_, output);
  }
  int64_t streamable_weights() const override { return engine_->getStreamableWeightsSize(); }
  bool set_weight_streaming_budget(int64_t bytes) override {
    // A plan other methods share may hold their contexts already: an equal budget stands.
    if (engine_->getWeightStreamingBudgetV2() == bytes) return true;
    return engine_->setWeightStreamingBudgetV2(bytes);
  }
  bool create_context() override {
    DeviceScope scope(device_);
    context_.reset(engine_->createExecutionContext());
    return context_ != nullptr;
  }

  int32_t profile_count() const override { return engine_->getNbOptimizationProfiles(); }
  bool profile_bounds(const char* name, int32_t profile, TrtDims& min,
                      TrtDims& max) const override {
    min = from_nv(engine_->getProfileShape(name, profile, nvinfer1::OptProfileSelector::kMIN));
    max = from_nv(engine_->getProfileShape(name, profile, nvinfer1::OptProfileSelector::kMAX));
    return min.nb >= 0 && max.nb == min.nb;
  }
  bool set_profile(int32_t profile) override {
    DeviceScope scope(device_);
    return scope.ok() && context_->setOptimizationProfileAsync(profile, stream());
  }
  bool set_input_shape(const char* name, const TrtDims& dims) override {
    return context_->setInputShape(name, to_nv(dims));
  }
  TrtDims context_shape(const char* name) const override {
    return from_nv(context_->getTensorShape(name));
  }
  bool set_address(const char* name, void* data) override {
    return context_->setTensorAddress(name, data);
  }
  bool enqueue() override {
    DeviceScope scope(device_);
    return scope.ok() && context_->enqueueV3(stream());
  }

  Result<void*> allocate(size_t nbytes) override {
    DeviceScope scope(device_);
    void* p = nullptr;
    last_ = scope.ok() ? cudaMalloc(&p, nbytes ? nbytes : 1) : cudaErrorInvalidDevice;
    if (last_ != cudaSuccess) return Error::MemoryAllocationFailed;
    allocations_.push_back(p);
    return p;
  }
  bool copy_async(void* dst, const void* src, size_t nbytes) override {
    DeviceScope scope(device_);
    last_ = scope.ok() ? cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream())
                       : cudaErrorInvalidDevice;
    return last_ == cudaSuccess;
  }
  bool read_to_host(void* dst, const void* src, size_t nbytes) override {
    DeviceScope scope(device_);
    last_ = scope.ok() ? cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream())
                       : cudaErrorInvalidDevice;
    if (last_ == cudaSuccess) last_ = cudaStreamSynchronize(stream());
    return last_ == cudaSuccess;
  }
#ifdef TTE_HAVE_CUDA_KERNELS
  bool copy_batch_async(const CopyRange* copies, size_t n) override {
    DeviceScope scope(device_);
    last_ = scope.ok() ? launch_copy_ranges(copies, n, stream()) : cudaErrorInvalidDevice;
    return last_ == cudaSuccess;
  }
#endif
  // On the caller's stream nothing waits here: whoever reads an output on the host reads it
  // through the device's copies, which wait for that stream (device.h).
  bool synchronize() override {
    if (caller_stream() != nullptr) return true;
    last_ = cudaStreamSynchronize(stream_);
    return last_ == cudaSuccess;
  }
  bool is_device_pointer(const void* p) const override {
    cudaPointerAttributes attr;
    const cudaError_t ce = cudaPointerGetAttributes(&attr, p);
    if (ce == cudaSuccess &&
        (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged)) {
      return true;
    }
    (void)cudaGetLastError();
    return false;
  }
  const char* last_error() const override {
    return last_ == cudaSuccess ? "see the log above" : cudaGetErrorString(last_);
  }

 private:
  template <class T>
  using Ptr = std::unique_ptr<T, Deleter<T>>;

  // The caller's stream when one is in force (tte::use_stream), else the engine's own.
  static cudaStream_t caller_stream() {
    Device* d = active_device();
    return d != nullptr ? static_cast<cudaStream_t>(d->stream()) : nullptr;
  }
  cudaStream_t stream() const {
    cudaStream_t caller = caller_stream();
    return caller != nullptr ? caller : stream_;
  }

  int device_ = 0;
  std::string sdk_;
  PlanHandle plan_;                          // an NvPlan, shared per key (shared_plans.h)
  nvinfer1::ICudaEngine* engine_ = nullptr;  // plan_'s
  Ptr<nvinfer1::IExecutionContext> context_;
  cudaStream_t stream_ = nullptr;
  cudaError_t last_ = cudaSuccess;
  std::vector<void*> allocations_;
};

}  // namespace

Result<std::unique_ptr<TrtApi>> open_tensorrt_sdk(const BlobInfo& info, Reason& why) {
  auto api = std::make_unique<NvInferApi>(static_cast<int>(info.device_id));
  if (Error e = api->open(info, why); e != Error::Ok) return e;
  return std::unique_ptr<TrtApi>(std::move(api));
}

}  // namespace tte
