// The TensorRT engine (nvinfer1); see tensorrt_engine.h. Compiled only with TensorRT found.
#include "tensorrt_engine.h"
#include "device.h"

#include "refusal.h"

#include <NvInferRuntime.h>
#include <cuda_runtime_api.h>

#include <executorch/runtime/platform/log.h>

#include <memory>
#include <string>
#include <vector>

namespace tte {
namespace {

class Logger final : public nvinfer1::ILogger {
 public:
  void log(Severity severity, nvinfer1::AsciiChar const* msg) noexcept override {
    if (severity <= Severity::kERROR) {
      ET_LOG(Error, "TensorRT: %s", msg);
    } else if (severity == Severity::kWARNING) {
      ET_LOG(Info, "TensorRT warning: %s", msg);
    }
  }
};

Logger& logger() {
  static Logger* l = new Logger();
  return *l;
}

struct TrtDeleter {
  template <class T>
  void operator()(T* p) const {
    delete p;
  }
};
template <class T>
using TrtPtr = std::unique_ptr<T, TrtDeleter>;

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

std::string dims_text(const nvinfer1::Dims& d) {
  std::string s = "[";
  for (int32_t i = 0; i < d.nbDims; ++i) {
    if (i) s += ',';
    s += std::to_string(d.d[i]);
  }
  return s + "]";
}

bool is_static(const nvinfer1::Dims& d) {
  if (d.nbDims < 0) return false;
  for (int32_t i = 0; i < d.nbDims; ++i) {
    if (d.d[i] < 0) return false;
  }
  return true;
}

// The engine's device current for a scope, the caller's current device restored at its end (the
// caller may be driving another GPU; init and every call leave its choice as they found it).
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

// A binding as the engine runs it: dtype and shape from the blob when it gives them (checked
// against the engine), else the engine's (an unknown TR01/TR02 binding).
struct IoTensor {
  std::string name;
  DType dtype = DType::Float32;
  nvinfer1::Dims dims{};
  size_t nbytes = 0;
  std::string text;  // "float32 [1,2,8,4]" for execute-time messages (built at init)
};

class TensorRTEngine final : public Engine {
 public:
  ~TensorRTEngine() override {
    DeviceScope scope(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    for (void* p : scratch_) cudaFree(p);
    context_.reset();
    engine_.reset();
    runtime_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  const char* kind() const override { return "tensorrt"; }

  ET_NODISCARD Error init(const BlobInfo& info, Reason& why) {
    device_ = static_cast<int>(info.device_id);
    DeviceScope scope(device_);
    if (!scope.ok()) {
      return why.fail(Error::DelegateInvalidCompatibility, "tensorrt.device",
                      format("cannot make CUDA device %d (the blob's device_id) current", device_));
    }
    Error e = deserialize(info, why);
    if (e == Error::Ok) e = resolve_inputs(info, why);
    if (e == Error::Ok) e = resolve_outputs(info, why);
    if (e == Error::Ok) e = create_stream(why);
    checked_in_.assign(inputs_.size(), nullptr);
    checked_out_.assign(outputs_.size(), nullptr);
    return e;
  }

  bool binding_type(bool is_input, size_t index, DType& dtype,
                    std::vector<int64_t>& shape) const override {
    const std::vector<IoTensor>& side = is_input ? inputs_ : outputs_;
    if (index >= side.size()) return false;
    const IoTensor& t = side[index];
    dtype = t.dtype;
    shape.assign(t.dims.d, t.dims.d + t.dims.nbDims);
    return true;
  }

  Result<void*> allocate_scratch(size_t nbytes, Reason& why) override {
    DeviceScope scope(device_);
    void* p = nullptr;
    cudaError_t ce = scope.ok() ? cudaMalloc(&p, nbytes ? nbytes : 1) : cudaErrorInvalidDevice;
    if (ce != cudaSuccess) {
      return why.fail(Error::MemoryAllocationFailed, "runtime.out_of_memory",
                      format("cudaMalloc(%zu) on device %d for a copy-back scratch buffer "
                             "failed: %s",
                             nbytes, device_, cudaGetErrorString(ce)));
    }
    scratch_.push_back(p);
    return p;
  }

  Error bind_input(size_t binding, void* data, size_t nbytes) override {
    const IoTensor& t = inputs_[binding];
    if (!sized(t, "input", nbytes) || !device_checked(checked_in_[binding], t, "input", data)) {
      return Error::InvalidArgument;
    }
    return context_->setTensorAddress(t.name.c_str(), data) ? Error::Ok : Error::InvalidArgument;
  }

  Error bind_output(size_t binding, void* data, size_t nbytes) override {
    const IoTensor& t = outputs_[binding];
    if (!sized(t, "output", nbytes) || !device_checked(checked_out_[binding], t, "output", data)) {
      return Error::InvalidArgument;
    }
    return context_->setTensorAddress(t.name.c_str(), data) ? Error::Ok : Error::InvalidArgument;
  }

  Error run() override {
    DeviceScope scope(device_);
    if (!scope.ok()) return Error::InvalidState;
    return context_->enqueueV3(stream()) ? Error::Ok : Error::Internal;
  }

  Error copy(void* dst, const void* src, size_t nbytes) override {
    if (dst == src) return Error::Ok;
    DeviceScope scope(device_);
    if (!scope.ok()) return Error::InvalidState;
    cudaError_t ce = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream());
    if (ce != cudaSuccess) {
      refuse("execute.copy", "cudaMemcpyAsync(%zu bytes) failed: %s", nbytes,
             cudaGetErrorString(ce));
      return Error::Internal;
    }
    return Error::Ok;
  }

  // On the caller's stream nothing waits here: whoever reads an output on the host reads it
  // through the device's copies, which wait for that stream (device.h).
  Error finish() override {
    if (caller_stream() != nullptr) return Error::Ok;
    cudaError_t ce = cudaStreamSynchronize(stream_);
    if (ce != cudaSuccess) {
      refuse("execute.finish", "cudaStreamSynchronize failed: %s", cudaGetErrorString(ce));
      return Error::Internal;
    }
    return Error::Ok;
  }

 private:
  // The runtime, the engine and its execution context; the engine has the blob's I/O count.
  Error deserialize(const BlobInfo& info, Reason& why) {
    runtime_.reset(nvinfer1::createInferRuntime(logger()));
    if (!runtime_) {
      return why.fail(Error::InvalidState, "tensorrt.runtime",
                      "nvinfer1::createInferRuntime failed");
    }
    engine_.reset(runtime_->deserializeCudaEngine(info.engine, info.engine_size));
    if (!engine_) {
      return why.fail(Error::DelegateInvalidCompatibility, "tensorrt.deserialize",
                      format("TensorRT could not deserialize the %llu-byte engine (built for "
                             "another TensorRT version or GPU? see the TensorRT error above)",
                             static_cast<unsigned long long>(info.engine_size)));
    }
    const size_t n_io = info.inputs.size() + info.outputs.size();
    if (engine_->getNbIOTensors() != static_cast<int32_t>(n_io)) {
      return why.fail(Error::InvalidProgram, "tensorrt.io_count",
                      format("the TensorRT engine has %d I/O tensors, the blob declares %zu "
                             "bindings",
                             engine_->getNbIOTensors(), n_io));
    }
    context_.reset(engine_->createExecutionContext());
    if (!context_) {
      return why.fail(Error::MemoryAllocationFailed, "runtime.out_of_memory",
                      "TensorRT could not create an execution context");
    }
    return Error::Ok;
  }

  Error resolve_inputs(const BlobInfo& info, Reason& why) {
    for (const Binding& b : info.inputs) {
      IoTensor t;
      Error e = resolve_type(b, nvinfer1::TensorIOMode::kINPUT, t, why);
      if (e == Error::Ok)
        e = resolve_input_shape(b, engine_->getTensorShape(b.name.c_str()), t, why);
      if (e != Error::Ok) return e;
      if (!context_->setInputShape(b.name.c_str(), t.dims)) {
        return why.fail(
            Error::InvalidProgram, "tensorrt.shape",
            "TensorRT refused shape " + dims_text(t.dims) + " for input binding '" + b.name + "'");
      }
      inputs_.push_back(std::move(t));
    }
    return Error::Ok;
  }

  // Output shapes, once every input shape is set: static, fitting a known binding's (whose -1
  // dimensions are sized by the delegate tensor, CONTRACTS §1).
  Error resolve_outputs(const BlobInfo& info, Reason& why) {
    for (const Binding& b : info.outputs) {
      IoTensor t;
      if (Error e = resolve_type(b, nvinfer1::TensorIOMode::kOUTPUT, t, why); e != Error::Ok) {
        return e;
      }
      const nvinfer1::Dims got = context_->getTensorShape(b.name.c_str());
      if (!is_static(got)) {
        return why.fail(Error::NotSupported, "tensorrt.dynamic_shape",
                        "TensorRT output '" + b.name + "' has the data-dependent shape " +
                            dims_text(got) + "; this runtime binds static shapes only");
      }
      bool same = !b.known || got.nbDims == static_cast<int32_t>(b.shape.size());
      for (int32_t k = 0; b.known && same && k < got.nbDims; ++k) {
        same = b.shape[k] < 0 || got.d[k] == b.shape[k];
      }
      if (!same) {
        return why.fail(Error::InvalidProgram, "tensorrt.shape",
                        "TensorRT output '" + b.name + "' has shape " + dims_text(got) +
                            ", the binding says " + b.describe());
      }
      t.dims = got;
      finish_tensor(t);
      outputs_.push_back(std::move(t));
    }
    return Error::Ok;
  }

  // The caller's stream when one is in force (tte::use_stream), else the engine's own.
  static cudaStream_t caller_stream() {
    Device* d = active_device();
    return d != nullptr ? static_cast<cudaStream_t>(d->stream()) : nullptr;
  }
  cudaStream_t stream() const {
    cudaStream_t caller = caller_stream();
    return caller != nullptr ? caller : stream_;
  }

  // `on_device`, asked only when the binding's address changed since the last call (state in
  // planned arenas keeps it): no driver query per binding per call.
  static bool device_checked(const void*& last, const IoTensor& t, const char* side,
                             const void* data) {
    if (data == last) return true;
    if (!on_device(t, side, data)) return false;
    last = data;
    return true;
  }

  // TensorRT reads and writes device memory only: a host address bound to it is refused here,
  // naming the binding, instead of faulting inside the engine.
  static bool on_device(const IoTensor& t, const char* side, const void* data) {
    cudaPointerAttributes attr;
    const cudaError_t ce = cudaPointerGetAttributes(&attr, data);
    if (ce == cudaSuccess &&
        (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged)) {
      return true;
    }
    (void)cudaGetLastError();
    refuse("execute.host_pointer",
           "TensorRTBackend: %s '%s' (%s) is bound to host memory at %p; a TensorRT engine reads "
           "and writes device memory only (load the program with a device: tte::use_device)",
           side, t.name.c_str(), t.text.c_str(), data);
    return false;
  }

  // Blocking (plain cudaStreamCreate): ordered with the legacy default stream, where other
  // producers of the caller's inputs may have written them.
  Error create_stream(Reason& why) {
    const cudaError_t ce = cudaStreamCreate(&stream_);
    if (ce != cudaSuccess) {
      return why.fail(Error::InvalidState, "tensorrt.stream",
                      format("cudaStreamCreate failed: %s", cudaGetErrorString(ce)));
    }
    return Error::Ok;
  }

  // Direction and data type: the engine's, checked against a known binding's.
  Error resolve_type(const Binding& b, nvinfer1::TensorIOMode want, IoTensor& t, Reason& why) {
    const char* side = want == nvinfer1::TensorIOMode::kINPUT ? "input" : "output";
    const char* name = b.name.c_str();
    if (engine_->getTensorIOMode(name) != want) {
      return why.fail(
          Error::InvalidProgram, "tensorrt.direction",
          std::string("the TensorRT engine has no ") + side + " tensor '" + b.name + "'");
    }
    const nvinfer1::DataType engine_type = engine_->getTensorDataType(name);
    DType d;
    if (!dtype_from_trt(static_cast<int32_t>(engine_type), d)) {
      return why.fail(Error::NotSupported, "tensorrt.dtype",
                      format("TensorRT %s '%s' has data type %d (nvinfer1::DataType), which a "
                             "binding cannot carry",
                             side, name, static_cast<int>(engine_type)));
    }
    if (b.known && d != b.dtype) {
      return why.fail(Error::InvalidProgram, "tensorrt.dtype",
                      std::string("TensorRT ") + side + " '" + b.name + "' is " + dtype_name(d) +
                          ", the binding says " + b.describe());
    }
    if (engine_->getTensorFormat(name) != nvinfer1::TensorFormat::kLINEAR) {
      return why.fail(Error::NotSupported, "tensorrt.format",
                      std::string("TensorRT ") + side + " '" + b.name +
                          "' has a vectorized format; this runtime binds linear (row-major) "
                          "tensors only");
    }
    t.name = b.name;
    t.dtype = d;
    return Error::Ok;
  }

  // A known input's shape must be static and fit the engine's (whose -1 dims it fixes); an
  // unknown input takes the engine's, which must then be static.
  Error resolve_input_shape(const Binding& b, const nvinfer1::Dims& engine_dims, IoTensor& t,
                            Reason& why) {
    if (!b.known) {
      if (!is_static(engine_dims)) {
        return why.fail(Error::NotSupported, "tensorrt.dynamic_shape",
                        "input binding '" + b.name +
                            "' leaves its shape to the engine (dtype '' and shape [] in the "
                            "blob), and the engine's shape " +
                            dims_text(engine_dims) +
                            " is dynamic; this runtime binds static shapes only");
      }
      t.dims = engine_dims;
      finish_tensor(t);
      return Error::Ok;
    }
    if (!b.is_static()) {
      return why.fail(Error::NotSupported, "tensorrt.dynamic_shape",
                      "input binding '" + b.name + "' has a dynamic shape " + b.describe() +
                          "; this runtime binds static shapes only");
    }
    bool same = engine_dims.nbDims == static_cast<int32_t>(b.shape.size()) &&
                b.shape.size() <= static_cast<size_t>(nvinfer1::Dims::MAX_DIMS);
    for (int32_t k = 0; same && k < engine_dims.nbDims; ++k) {
      same = engine_dims.d[k] < 0 || engine_dims.d[k] == b.shape[k];
    }
    if (!same) {
      return why.fail(Error::InvalidProgram, "tensorrt.shape",
                      "TensorRT input '" + b.name + "' has shape " + dims_text(engine_dims) +
                          ", the binding says " + b.describe());
    }
    t.dims.nbDims = static_cast<int32_t>(b.shape.size());
    for (size_t k = 0; k < b.shape.size(); ++k) t.dims.d[k] = b.shape[k];
    finish_tensor(t);
    return Error::Ok;
  }

  static void finish_tensor(IoTensor& t) {
    size_t n = dtype_size(t.dtype);
    for (int32_t k = 0; k < t.dims.nbDims; ++k) n *= static_cast<size_t>(t.dims.d[k]);
    t.nbytes = n;
    t.text = std::string(dtype_name(t.dtype)) + " " + dims_text(t.dims);
  }

  // The delegate tensor bound to `t` must hold exactly its bytes (an unknown binding's tensor
  // is checked only here).
  static bool sized(const IoTensor& t, const char* side, size_t nbytes) {
    if (nbytes == t.nbytes) return true;
    refuse("execute.nbytes",
           "TensorRT %s '%s' is %s (%zu bytes); the tensor bound to it holds %zu bytes", side,
           t.name.c_str(), t.text.c_str(), t.nbytes, nbytes);
    return false;
  }

  int device_ = 0;
  TrtPtr<nvinfer1::IRuntime> runtime_;
  TrtPtr<nvinfer1::ICudaEngine> engine_;
  TrtPtr<nvinfer1::IExecutionContext> context_;
  cudaStream_t stream_ = nullptr;
  std::vector<const void*> checked_in_, checked_out_;  // last address verified per binding
  std::vector<IoTensor> inputs_, outputs_;
  std::vector<void*> scratch_;
};

}  // namespace

Result<std::unique_ptr<Engine>> create_tensorrt_engine(const BlobInfo& info, Reason& why) {
  auto engine = std::make_unique<TensorRTEngine>();
  Error e = engine->init(info, why);
  if (e != Error::Ok) return e;
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace tte
