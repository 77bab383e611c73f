// What the TensorRT engine (tensorrt_engine.cpp) needs of TensorRT and CUDA, as one interface:
// the seam between the engine's own logic — bindings by name, shapes, aliasing verification,
// weight streaming, scratch, device-pointer checks, error texts — and nvinfer1 / the CUDA runtime.
// nvinfer_api.cpp implements it over TensorRT or TensorRT-RTX (whichever SDK the runtime was built
// with); runtime/tests/fake_trt.h implements it in host memory, so the engine's logic is
// unit-tested on machines that have neither.
//
// Invariant: a TrtApi holds one deserialized engine (and, after `create_context`, one execution
// context) and makes the blob's device current for each call that needs it, restoring the
// caller's; names are binding (I/O tensor) names; nothing here allocates after `create_context`
// but `allocate`, which the engine calls only at init.
#pragma once

#include "common.h"
#include "device.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tte {

struct BlobInfo;

struct TrtDims {
  int32_t nb = -1;  // -1: unknown (no such tensor)
  int64_t d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
};

enum class TrtIo : uint8_t { None, Input, Output };

// What the engine says an output aliases: `known` false where this TensorRT cannot say (before
// 10.15: no ICudaEngine::getAliasedInputTensor); else `input` is the input's name or nullptr.
struct TrtAlias {
  bool known = false;
  const char* input = nullptr;
};

class TrtApi {
 public:
  virtual ~TrtApi() = default;
  virtual const char* sdk() const = 0;  // "TensorRT 11.1.0", "TensorRT-RTX 1.6.1" (messages)

  // The engine.
  virtual int32_t io_count() const = 0;
  virtual TrtIo io_mode(const char* name) const = 0;
  virtual int32_t data_type(const char* name) const = 0;     // an nvinfer1::DataType value
  virtual bool linear(const char* name) const = 0;           // TensorFormat::kLINEAR
  virtual TrtDims engine_shape(const char* name) const = 0;  // -1: a dynamic dimension
  virtual TrtAlias aliased_input(const char* output) const = 0;
  // An input TensorRT reads on the host when it enqueues — a shape tensor (a start position or a
  // length an engine computes shapes from; ICudaEngine::isShapeInferenceIO): bound to host
  // memory holding its value, never to device memory.
  virtual bool host_input(const char* name) const = 0;
  virtual int64_t streamable_weights() const = 0;  // 0: built without weight streaming
  ET_NODISCARD virtual bool set_weight_streaming_budget(int64_t bytes) = 0;
  ET_NODISCARD virtual bool create_context() = 0;

  // Optimization profiles (an engine built for dynamic shapes has at least one): input `name`'s
  // bounds in profile `profile` (false when it has none there).
  virtual int32_t profile_count() const = 0;
  virtual bool profile_bounds(const char* name, int32_t profile, TrtDims& min,
                              TrtDims& max) const = 0;

  // The execution context.
  // The profile the context runs with (on the engine's stream); profile 0 until set.
  ET_NODISCARD virtual bool set_profile(int32_t profile) = 0;
  ET_NODISCARD virtual bool set_input_shape(const char* name, const TrtDims& dims) = 0;
  virtual TrtDims context_shape(const char* name) const = 0;
  ET_NODISCARD virtual bool set_address(const char* name, void* data) = 0;
  // On the caller's stream when one is in force (tte::use_stream), else the engine's own.
  ET_NODISCARD virtual bool enqueue() = 0;

  // Device memory and copies, on the same stream as `enqueue`.
  virtual Result<void*> allocate(size_t nbytes) = 0;  // freed with the TrtApi
  ET_NODISCARD virtual bool copy_async(void* dst, const void* src, size_t nbytes) = 0;
  // Device-to-device ranges that do not overlap, as one operation where the SDK build has the
  // batched copy kernel; this default makes them one `copy_async` each.
  ET_NODISCARD virtual bool copy_batch_async(const CopyRange* copies, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (!copy_async(copies[i].dst, copies[i].src, copies[i].nbytes)) return false;
    }
    return true;
  }
  // `nbytes` of `src` (device or host memory) into host memory `dst`, complete on return: the
  // value of a host input, read before the engine is enqueued (work before it on the stream
  // finishes first).
  ET_NODISCARD virtual bool read_to_host(void* dst, const void* src, size_t nbytes) = 0;
  // Waits for this call's work unless a caller stream is in force (its owner waits for it).
  ET_NODISCARD virtual bool synchronize() = 0;
  virtual bool is_device_pointer(const void* p) const = 0;
  virtual const char* last_error() const = 0;  // the CUDA / TensorRT error of the last failure
};

// The SDK the runtime was built with, over the blob's engine (nvinfer_api.cpp; only linked when
// an SDK was found): deserialized on the blob's device, or refused with `why` set.
Result<std::unique_ptr<TrtApi>> open_tensorrt_sdk(const BlobInfo& info, Reason& why);

// TensorRT-RTX runs on the compute capabilities its support matrix lists (7.5, 8.6, 8.9, 12.0,
// 12.1 as of TensorRT-RTX 1.5): Error::Ok, or NotSupported naming `device`'s and the supported
// ones (tensorrt.rtx_device).
ET_NODISCARD Error check_rtx_device(int device, int major, int minor, Reason& why);

}  // namespace tte
