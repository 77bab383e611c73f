// The TensorRT engine (nvinfer1); see tte/tensorrt_engine.h. Compiled only with TensorRT found.
#include <tte/tensorrt_engine.h>

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

// The blob dtype of a TensorRT I/O type; false for types a binding cannot carry (FP8, INT4, ...).
bool from_trt_type(nvinfer1::DataType t, DType& out) {
  switch (t) {
    case nvinfer1::DataType::kFLOAT: out = DType::Float32; return true;
    case nvinfer1::DataType::kHALF: out = DType::Float16; return true;
    case nvinfer1::DataType::kBF16: out = DType::BFloat16; return true;
    case nvinfer1::DataType::kINT64: out = DType::Int64; return true;
    case nvinfer1::DataType::kINT32: out = DType::Int32; return true;
    case nvinfer1::DataType::kINT8: out = DType::Int8; return true;
    case nvinfer1::DataType::kUINT8: out = DType::UInt8; return true;
    case nvinfer1::DataType::kBOOL: out = DType::Bool; return true;
    default: return false;
  }
}

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

  Error init(const BlobInfo& info, std::string& why) {
    device_ = static_cast<int>(info.device_id);
    DeviceScope scope(device_);
    if (!scope.ok()) {
      why = format("cannot make CUDA device %d (the blob's device_id) current", device_);
      return Error::DelegateInvalidCompatibility;
    }
    runtime_.reset(nvinfer1::createInferRuntime(logger()));
    if (!runtime_) {
      why = "nvinfer1::createInferRuntime failed";
      return Error::InvalidState;
    }
    engine_.reset(runtime_->deserializeCudaEngine(info.engine, info.engine_size));
    if (!engine_) {
      why = format(
          "TensorRT could not deserialize the %llu-byte engine (built for another "
          "TensorRT version or GPU? see the TensorRT error above)",
          static_cast<unsigned long long>(info.engine_size));
      return Error::DelegateInvalidCompatibility;
    }
    const size_t n_io = info.inputs.size() + info.outputs.size();
    if (engine_->getNbIOTensors() != static_cast<int32_t>(n_io)) {
      why = format("the TensorRT engine has %d I/O tensors, the blob declares %zu bindings",
                   engine_->getNbIOTensors(), n_io);
      return Error::InvalidProgram;
    }
    context_.reset(engine_->createExecutionContext());
    if (!context_) {
      why = "TensorRT could not create an execution context";
      return Error::MemoryAllocationFailed;
    }
    for (const Binding& b : info.inputs) {
      IoTensor t;
      if (Error e = resolve_type(b, nvinfer1::TensorIOMode::kINPUT, t, why); e != Error::Ok) {
        return e;
      }
      const nvinfer1::Dims engine_dims = engine_->getTensorShape(b.name.c_str());
      if (Error e = resolve_input_shape(b, engine_dims, t, why); e != Error::Ok) return e;
      if (!context_->setInputShape(b.name.c_str(), t.dims)) {
        why = "TensorRT refused shape " + dims_text(t.dims) + " for input binding '" + b.name + "'";
        return Error::InvalidProgram;
      }
      inputs_.push_back(std::move(t));
    }
    for (const Binding& b : info.outputs) {  // shapes once every input shape is set
      IoTensor t;
      if (Error e = resolve_type(b, nvinfer1::TensorIOMode::kOUTPUT, t, why); e != Error::Ok) {
        return e;
      }
      const nvinfer1::Dims got = context_->getTensorShape(b.name.c_str());
      if (!is_static(got)) {
        why = "TensorRT output '" + b.name + "' has the data-dependent shape " + dims_text(got) +
              "; this runtime binds static shapes only";
        return Error::NotSupported;
      }
      if (b.known) {  // a -1 in the binding is sized by the delegate tensor (CONTRACTS §1)
        bool same = got.nbDims == static_cast<int32_t>(b.shape.size());
        for (int32_t k = 0; same && k < got.nbDims; ++k) {
          same = b.shape[k] < 0 || got.d[k] == b.shape[k];
        }
        if (!same) {
          why = "TensorRT output '" + b.name + "' has shape " + dims_text(got) +
                ", the binding says " + b.describe();
          return Error::InvalidProgram;
        }
      }
      t.dims = got;
      finish_tensor(t);
      outputs_.push_back(std::move(t));
    }
    // Blocking (plain cudaStreamCreate): ordered with the legacy default stream, where other
    // producers of the caller's inputs may have written them.
    cudaError_t ce = cudaStreamCreate(&stream_);
    if (ce != cudaSuccess) {
      why = format("cudaStreamCreate failed: %s", cudaGetErrorString(ce));
      return Error::InvalidState;
    }
    return Error::Ok;
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

  Result<void*> allocate_scratch(size_t nbytes, std::string& why) override {
    DeviceScope scope(device_);
    void* p = nullptr;
    cudaError_t ce = scope.ok() ? cudaMalloc(&p, nbytes ? nbytes : 1) : cudaErrorInvalidDevice;
    if (ce != cudaSuccess) {
      why = format("cudaMalloc(%zu) on device %d for a copy-back scratch buffer failed: %s", nbytes,
                   device_, cudaGetErrorString(ce));
      return Error::MemoryAllocationFailed;
    }
    scratch_.push_back(p);
    return p;
  }

  Error bind_input(size_t binding, void* data, size_t nbytes) override {
    const IoTensor& t = inputs_[binding];
    if (!sized(t, "input", nbytes)) return Error::InvalidArgument;
    return context_->setTensorAddress(t.name.c_str(), data) ? Error::Ok : Error::InvalidArgument;
  }

  Error bind_output(size_t binding, void* data, size_t nbytes) override {
    const IoTensor& t = outputs_[binding];
    if (!sized(t, "output", nbytes)) return Error::InvalidArgument;
    return context_->setTensorAddress(t.name.c_str(), data) ? Error::Ok : Error::InvalidArgument;
  }

  Error run() override {
    DeviceScope scope(device_);
    if (!scope.ok()) return Error::InvalidState;
    return context_->enqueueV3(stream_) ? Error::Ok : Error::Internal;
  }

  Error copy(void* dst, const void* src, size_t nbytes) override {
    if (dst == src) return Error::Ok;
    DeviceScope scope(device_);
    if (!scope.ok()) return Error::InvalidState;
    cudaError_t ce = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream_);
    if (ce != cudaSuccess) {
      ET_LOG(Error, "cudaMemcpyAsync(%zu bytes) failed: %s", nbytes, cudaGetErrorString(ce));
      return Error::Internal;
    }
    return Error::Ok;
  }

  Error finish() override {
    cudaError_t ce = cudaStreamSynchronize(stream_);
    if (ce != cudaSuccess) {
      ET_LOG(Error, "cudaStreamSynchronize failed: %s", cudaGetErrorString(ce));
      return Error::Internal;
    }
    return Error::Ok;
  }

 private:
  // Direction and data type: the engine's, checked against a known binding's.
  Error resolve_type(const Binding& b, nvinfer1::TensorIOMode want, IoTensor& t, std::string& why) {
    const char* side = want == nvinfer1::TensorIOMode::kINPUT ? "input" : "output";
    const char* name = b.name.c_str();
    if (engine_->getTensorIOMode(name) != want) {
      why = std::string("the TensorRT engine has no ") + side + " tensor '" + b.name + "'";
      return Error::InvalidProgram;
    }
    const nvinfer1::DataType engine_type = engine_->getTensorDataType(name);
    DType d;
    if (!from_trt_type(engine_type, d)) {
      why = format(
          "TensorRT %s '%s' has data type %d (nvinfer1::DataType), which a binding "
          "cannot carry",
          side, name, static_cast<int>(engine_type));
      return Error::NotSupported;
    }
    if (b.known && d != b.dtype) {
      why = std::string("TensorRT ") + side + " '" + b.name + "' is " + dtype_name(d) +
            ", the binding says " + b.describe();
      return Error::InvalidProgram;
    }
    if (engine_->getTensorFormat(name) != nvinfer1::TensorFormat::kLINEAR) {
      why = std::string("TensorRT ") + side + " '" + b.name +
            "' has a vectorized format; this "
            "runtime binds linear (row-major) tensors only";
      return Error::NotSupported;
    }
    t.name = b.name;
    t.dtype = d;
    return Error::Ok;
  }

  // A known input's shape must be static and fit the engine's (whose -1 dims it fixes); an
  // unknown input takes the engine's, which must then be static.
  Error resolve_input_shape(const Binding& b, const nvinfer1::Dims& engine_dims, IoTensor& t,
                            std::string& why) {
    if (!b.known) {
      if (!is_static(engine_dims)) {
        why = "input binding '" + b.name +
              "' leaves its shape to the engine (dtype '' and shape "
              "[] in the blob), and the engine's shape " +
              dims_text(engine_dims) + " is dynamic; this runtime binds static shapes only";
        return Error::NotSupported;
      }
      t.dims = engine_dims;
      finish_tensor(t);
      return Error::Ok;
    }
    if (!b.is_static()) {
      why = "input binding '" + b.name + "' has a dynamic shape " + b.describe() +
            "; this runtime binds static shapes only";
      return Error::NotSupported;
    }
    bool same = engine_dims.nbDims == static_cast<int32_t>(b.shape.size()) &&
                b.shape.size() <= static_cast<size_t>(nvinfer1::Dims::MAX_DIMS);
    for (int32_t k = 0; same && k < engine_dims.nbDims; ++k) {
      same = engine_dims.d[k] < 0 || engine_dims.d[k] == b.shape[k];
    }
    if (!same) {
      why = "TensorRT input '" + b.name + "' has shape " + dims_text(engine_dims) +
            ", the binding says " + b.describe();
      return Error::InvalidProgram;
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
    ET_LOG(Error, "TensorRT %s '%s' is %s (%zu bytes); the tensor bound to it holds %zu bytes",
           side, t.name.c_str(), t.text.c_str(), t.nbytes, nbytes);
    return false;
  }

  int device_ = 0;
  TrtPtr<nvinfer1::IRuntime> runtime_;
  TrtPtr<nvinfer1::ICudaEngine> engine_;
  TrtPtr<nvinfer1::IExecutionContext> context_;
  cudaStream_t stream_ = nullptr;
  std::vector<IoTensor> inputs_, outputs_;
  std::vector<void*> scratch_;
};

}  // namespace

Result<std::unique_ptr<Engine>> create_tensorrt_engine(const BlobInfo& info, std::string& why) {
  auto engine = std::make_unique<TensorRTEngine>();
  Error e = engine->init(info, why);
  if (e != Error::Ok) return e;
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace tte
