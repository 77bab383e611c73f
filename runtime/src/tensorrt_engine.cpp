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
  void operator()(T* p) const { delete p; }
};
template <class T>
using TrtPtr = std::unique_ptr<T, TrtDeleter>;

bool trt_type(DType d, nvinfer1::DataType& out) {
  switch (d) {
    case DType::Float32: out = nvinfer1::DataType::kFLOAT; return true;
    case DType::Float16: out = nvinfer1::DataType::kHALF; return true;
    case DType::BFloat16: out = nvinfer1::DataType::kBF16; return true;
    case DType::Int64: out = nvinfer1::DataType::kINT64; return true;
    case DType::Int32: out = nvinfer1::DataType::kINT32; return true;
    case DType::Int8: out = nvinfer1::DataType::kINT8; return true;
    case DType::UInt8: out = nvinfer1::DataType::kUINT8; return true;
    case DType::Bool: out = nvinfer1::DataType::kBOOL; return true;
    case DType::Float64: return false;
  }
  return false;
}

std::string dims_text(const nvinfer1::Dims& d) {
  std::string s = "[";
  for (int32_t i = 0; i < d.nbDims; ++i) {
    if (i) s += ',';
    s += std::to_string(d.d[i]);
  }
  return s + "]";
}

class TensorRTEngine final : public Engine {
 public:
  ~TensorRTEngine() override {
    if (stream_) {
      cudaStreamSynchronize(stream_);
    }
    for (void* p : scratch_) cudaFree(p);
    context_.reset();
    engine_.reset();
    runtime_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  const char* kind() const override { return "tensorrt"; }

  Error init(const BlobInfo& info, std::string& why) {
    device_ = static_cast<int>(info.device_id);
    cudaError_t ce = cudaSetDevice(device_);
    if (ce != cudaSuccess) {
      why = format("cudaSetDevice(%d) failed: %s", device_, cudaGetErrorString(ce));
      return Error::DelegateInvalidCompatibility;
    }
    runtime_.reset(nvinfer1::createInferRuntime(logger()));
    if (!runtime_) {
      why = "nvinfer1::createInferRuntime failed";
      return Error::InvalidState;
    }
    engine_.reset(runtime_->deserializeCudaEngine(info.engine, info.engine_size));
    if (!engine_) {
      why = format("TensorRT could not deserialize the %llu-byte engine (built for another "
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
      if (!check_binding(b, nvinfer1::TensorIOMode::kINPUT, why)) return Error::InvalidProgram;
      if (!b.is_static()) {
        why = "input binding '" + b.name + "' has a dynamic shape " + b.describe() +
              "; this runtime binds static shapes only";
        return Error::NotSupported;
      }
      nvinfer1::Dims dims{};
      dims.nbDims = static_cast<int32_t>(b.shape.size());
      for (size_t k = 0; k < b.shape.size(); ++k) dims.d[k] = b.shape[k];
      if (!context_->setInputShape(b.name.c_str(), dims)) {
        why = "TensorRT refused shape " + b.describe() + " for input binding '" + b.name + "'";
        return Error::InvalidProgram;
      }
      input_names_.push_back(b.name);
    }
    for (const Binding& b : info.outputs) {
      if (!check_binding(b, nvinfer1::TensorIOMode::kOUTPUT, why)) return Error::InvalidProgram;
      nvinfer1::Dims got = context_->getTensorShape(b.name.c_str());
      bool same = got.nbDims == static_cast<int32_t>(b.shape.size());
      for (int32_t k = 0; same && k < got.nbDims; ++k) same = got.d[k] == b.shape[k];
      if (!same) {
        why = "TensorRT output '" + b.name + "' has shape " + dims_text(got) +
              ", the binding says " + b.describe();
        return Error::InvalidProgram;
      }
      output_names_.push_back(b.name);
    }
    ce = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
      why = format("cudaStreamCreate failed: %s", cudaGetErrorString(ce));
      return Error::InvalidState;
    }
    return Error::Ok;
  }

  Result<void*> allocate_scratch(size_t nbytes, std::string& why) override {
    void* p = nullptr;
    cudaError_t ce = cudaMalloc(&p, nbytes ? nbytes : 1);
    if (ce != cudaSuccess) {
      why = format("cudaMalloc(%zu) for a copy-back scratch buffer failed: %s", nbytes,
                   cudaGetErrorString(ce));
      return Error::MemoryAllocationFailed;
    }
    scratch_.push_back(p);
    return p;
  }

  Error bind_input(size_t binding, void* data, size_t nbytes) override {
    return context_->setTensorAddress(input_names_[binding].c_str(), data) ? Error::Ok
                                                                           : Error::InvalidArgument;
  }

  Error bind_output(size_t binding, void* data, size_t nbytes) override {
    return context_->setTensorAddress(output_names_[binding].c_str(), data)
               ? Error::Ok
               : Error::InvalidArgument;
  }

  Error run() override {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess) return Error::InvalidState;
    if (current != device_ && cudaSetDevice(device_) != cudaSuccess) return Error::InvalidState;
    return context_->enqueueV3(stream_) ? Error::Ok : Error::Internal;
  }

  Error copy(void* dst, const void* src, size_t nbytes) override {
    if (dst == src) return Error::Ok;
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
  bool check_binding(const Binding& b, nvinfer1::TensorIOMode want, std::string& why) {
    const char* side = want == nvinfer1::TensorIOMode::kINPUT ? "input" : "output";
    if (engine_->getTensorIOMode(b.name.c_str()) != want) {
      why = std::string("the TensorRT engine has no ") + side + " tensor '" + b.name + "'";
      return false;
    }
    nvinfer1::DataType want_type;
    if (!trt_type(b.dtype, want_type)) {
      why = std::string("binding '") + b.name + "' has dtype " + dtype_name(b.dtype) +
            ", which TensorRT does not support";
      return false;
    }
    if (engine_->getTensorDataType(b.name.c_str()) != want_type) {
      why = std::string("TensorRT ") + side + " '" + b.name + "' has another data type than "
            "the binding's " + dtype_name(b.dtype);
      return false;
    }
    return true;
  }

  int device_ = 0;
  TrtPtr<nvinfer1::IRuntime> runtime_;
  TrtPtr<nvinfer1::ICudaEngine> engine_;
  TrtPtr<nvinfer1::IExecutionContext> context_;
  cudaStream_t stream_ = nullptr;
  std::vector<std::string> input_names_, output_names_;
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
