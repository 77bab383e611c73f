// The TensorRT engine's own logic over TrtApi (trt_api.h); see tensorrt_engine.h. Compiled into
// every build: the SDK itself is reached only through the TrtApi that open_tensorrt_sdk returns.
#include "tensorrt_engine.h"

#include "dtype.h"
#include "refusal.h"

#include <executorch/runtime/platform/log.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tte {
namespace {

std::string dims_text(const TrtDims& d) {
  std::string s = "[";
  for (int32_t i = 0; i < d.nb; ++i) {
    if (i) s += ',';
    s += std::to_string(d.d[i]);
  }
  return s + "]";
}

bool is_static(const TrtDims& d) {
  if (d.nb < 0) return false;
  for (int32_t i = 0; i < d.nb; ++i) {
    if (d.d[i] < 0) return false;
  }
  return true;
}

// A binding as the engine runs it: dtype and shape from the blob when it gives them (checked
// against the engine), else the engine's (an unknown TR01/TR02 binding).
// The largest shape-tensor input bound through host memory (8 int64 values: a rank-8 shape).
constexpr size_t kHostInputBytes = 64;

struct IoTensor {
  std::string name;
  DType dtype = DType::Float32;
  TrtDims dims{};     // a dynamic binding: this call's (at init: its max_shape's)
  size_t nbytes = 0;  // of `dims`
  std::string text;   // "float32 [1,2,8,4]" for execute-time messages (built at init)
  bool dynamic = false;
  // An input TensorRT reads on the host (a shape tensor): bound to `value`, this call's copy.
  bool host = false;
  alignas(8) uint8_t value[kHostInputBytes] = {};
};

bool same_dims(const TrtDims& a, const TrtDims& b) {
  if (a.nb != b.nb) return false;
  for (int32_t k = 0; k < a.nb; ++k) {
    if (a.d[k] != b.d[k]) return false;
  }
  return true;
}

bool within(const TrtDims& d, const TrtDims& lo, const TrtDims& hi) {
  if (d.nb != lo.nb || d.nb != hi.nb) return false;
  for (int32_t k = 0; k < d.nb; ++k) {
    if (d.d[k] < lo.d[k] || d.d[k] > hi.d[k]) return false;
  }
  return true;
}

// "[1,-1,8]" into `buf` (no allocation: execute-time messages).
const char* dims_c(const TrtDims& d, char* buf, size_t n) {
  size_t at = std::snprintf(buf, n, "[");
  for (int32_t k = 0; k < d.nb && at < n; ++k) {
    at += std::snprintf(buf + at, n - at, k ? ",%lld" : "%lld", static_cast<long long>(d.d[k]));
  }
  if (at < n) std::snprintf(buf + at, n - at, "]");
  return buf;
}

const char* kind_name(EngineKind k) {
  return k == EngineKind::TensorRTRTX ? "tensorrt_rtx" : "tensorrt";
}

class TensorRTEngine final : public Engine {
 public:
  TensorRTEngine(std::unique_ptr<TrtApi> api, EngineKind kind)
      : api_(std::move(api)), kind_(kind) {}

  const char* kind() const override { return kind_name(kind_); }

  ET_NODISCARD Error init(const BlobInfo& info, Reason& why) {
    const size_t n_io = info.inputs.size() + info.outputs.size();
    if (api_->io_count() != static_cast<int32_t>(n_io)) {
      return why.fail(Error::InvalidProgram, "tensorrt.io_count",
                      format("the %s engine has %d I/O tensors, the blob declares %zu bindings",
                             api_->sdk(), api_->io_count(), n_io));
    }
    Error e = verify_aliasing(info, why);
    if (e == Error::Ok) e = stream_weights(info, why);
    if (e == Error::Ok && !api_->create_context()) {
      e = why.fail(
          Error::MemoryAllocationFailed, "runtime.out_of_memory",
          format("%s could not create an execution context (%s)", api_->sdk(), api_->last_error()));
    }
    if (e == Error::Ok) e = resolve_inputs(info, why);
    if (e == Error::Ok) e = load_profiles(why);
    if (e == Error::Ok) e = resolve_outputs(info, why);
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
    shape.assign(t.dims.d, t.dims.d + t.dims.nb);
    return true;
  }

  Result<void*> allocate_scratch(size_t nbytes, Reason& why) override {
    auto p = api_->allocate(nbytes);
    if (!p.ok()) {
      return why.fail(Error::MemoryAllocationFailed, "runtime.out_of_memory",
                      format("allocating %zu bytes of device memory for a copy-back scratch "
                             "buffer failed (%s)",
                             nbytes, api_->last_error()));
    }
    return p.get();
  }

  // This call's shape of a dynamic input (applied with the others before the outputs are read,
  // bound or run: apply_shapes).
  Error set_input_shape(size_t binding, const int32_t* sizes, size_t rank) override {
    IoTensor& t = inputs_[binding];
    if (!t.dynamic || rank != static_cast<size_t>(t.dims.nb))
      return Engine::set_input_shape(binding, sizes, rank);
    TrtDims d;
    d.nb = t.dims.nb;
    for (size_t k = 0; k < rank; ++k) d.d[k] = sizes[k];
    if (!same_dims(d, t.dims)) {
      t.dims = d;
      t.nbytes = byte_size(t);
      dirty_ = true;
    }
    return Error::Ok;
  }

  bool output_shape(size_t binding, int32_t* sizes, size_t rank) override {
    if (binding >= outputs_.size() || apply_shapes() != Error::Ok) return false;
    const TrtDims& d = outputs_[binding].dims;
    if (rank != static_cast<size_t>(d.nb)) return false;
    for (size_t k = 0; k < rank; ++k) sizes[k] = static_cast<int32_t>(d.d[k]);
    return true;
  }

  Error bind_input(size_t binding, void* data, size_t nbytes) override {
    IoTensor& t = inputs_[binding];
    if (t.host) return bind_host_input(t, data, nbytes);
    if (!sized(t, "input", nbytes) || !device_checked(checked_in_[binding], t, "input", data)) {
      return Error::InvalidArgument;
    }
    return api_->set_address(t.name.c_str(), data) ? Error::Ok : Error::InvalidArgument;
  }

  // A shape tensor's value, wherever the caller's tensor is, copied to host memory before the
  // engine is enqueued; a new value may change the outputs' shapes (read again).
  Error bind_host_input(IoTensor& t, const void* data, size_t nbytes) {
    if (!sized(t, "input", nbytes)) return Error::InvalidArgument;
    uint8_t now[kHostInputBytes];
    if (api_->is_device_pointer(data)) {
      if (!api_->read_to_host(now, data, nbytes)) {
        refuse("execute.host_input",
               "TensorRTBackend: reading the value of shape input '%s' from device memory "
               "failed (%s)",
               t.name.c_str(), api_->last_error());
        return Error::Internal;
      }
    } else {
      std::memcpy(now, data, nbytes);
    }
    if (std::memcmp(now, t.value, nbytes) != 0) {
      std::memcpy(t.value, now, nbytes);
      dirty_ = true;
    }
    return api_->set_address(t.name.c_str(), t.value) ? Error::Ok : Error::InvalidArgument;
  }

  Error bind_output(size_t binding, void* data, size_t nbytes) override {
    if (Error e = apply_shapes(); e != Error::Ok) return e;
    const IoTensor& t = outputs_[binding];
    if (!sized(t, "output", nbytes) || !device_checked(checked_out_[binding], t, "output", data)) {
      return Error::InvalidArgument;
    }
    return api_->set_address(t.name.c_str(), data) ? Error::Ok : Error::InvalidArgument;
  }

  Error run() override {
    if (Error e = apply_shapes(); e != Error::Ok) return e;
    if (api_->enqueue()) return Error::Ok;
    refuse("execute.enqueue", "TensorRTBackend: %s refused to enqueue the engine (%s)", api_->sdk(),
           api_->last_error());
    return Error::Internal;
  }

  Error copy(void* dst, const void* src, size_t nbytes) override {
    if (dst == src || api_->copy_async(dst, src, nbytes)) return Error::Ok;
    refuse("execute.copy", "TensorRTBackend: copying %zu bytes on the engine's stream failed (%s)",
           nbytes, api_->last_error());
    return Error::Internal;
  }

  Error copy_batch(const CopyRange* copies, size_t n) override {
    if (api_->copy_batch_async(copies, n)) return Error::Ok;
    refuse("execute.copy",
           "TensorRTBackend: the batched copy of %zu outputs on the engine's "
           "stream failed (%s)",
           n, api_->last_error());
    return Error::Internal;
  }

  Error finish() override {
    if (api_->synchronize()) return Error::Ok;
    refuse("execute.finish", "TensorRTBackend: waiting for the engine's stream failed (%s)",
           api_->last_error());
    return Error::Internal;
  }

 private:
  static size_t byte_size(const IoTensor& t) {
    size_t n = dtype_size(t.dtype);
    for (int32_t k = 0; k < t.dims.nb; ++k) n *= static_cast<size_t>(t.dims.d[k]);
    return n;
  }

  // Dynamic inputs: the engine's optimization profiles, each input's bounds in each. The blob's
  // max_shape must fit one profile (the program hands the engine shapes up to it); the context
  // starts at the max_shapes, so every output has a static shape at init.
  Error load_profiles(Reason& why) {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (inputs_[i].dynamic) dynamic_.push_back(i);
    }
    if (dynamic_.empty()) return Error::Ok;
    const int32_t n = api_->profile_count();
    for (int32_t p = 0; p < n; ++p) {
      std::vector<Bounds> bounds;
      for (size_t i : dynamic_) {
        Bounds b;
        if (!api_->profile_bounds(inputs_[i].name.c_str(), p, b.min, b.max)) {
          return why.fail(Error::InvalidProgram, "tensorrt.profile",
                          format("%s gives no bounds for input '%s' in optimization profile %d",
                                 api_->sdk(), inputs_[i].name.c_str(), p));
        }
        bounds.push_back(b);
      }
      profiles_.push_back(std::move(bounds));
    }
    if (select_profile() < 0) {
      const IoTensor& t = inputs_[dynamic_[0]];
      std::string have;
      for (size_t p = 0; p < profiles_.size(); ++p) {
        have +=
            format("%sprofile %zu: %s to %s", p ? "; " : "", p,
                   dims_text(profiles_[p][0].min).c_str(), dims_text(profiles_[p][0].max).c_str());
      }
      return why.fail(Error::InvalidProgram, "tensorrt.profile",
                      "the blob bounds input binding '" + t.name + "' at " + dims_text(t.dims) +
                          " (max_shape), which no optimization profile of the " + api_->sdk() +
                          " engine holds (" + (have.empty() ? "it has none" : have) +
                          "); rebuild the engine for the exported bounds");
    }
    dirty_ = true;
    if (apply_shapes() != Error::Ok) {
      return why.fail(
          Error::InvalidProgram, "tensorrt.shape",
          std::string("setting the max_shape of every dynamic input failed: ") + last_refusal());
    }
    return Error::Ok;
  }

  // The first profile holding every dynamic input's current shape, or -1.
  int32_t select_profile() const {
    for (size_t p = 0; p < profiles_.size(); ++p) {
      bool fits = true;
      for (size_t k = 0; fits && k < dynamic_.size(); ++k) {
        fits = within(inputs_[dynamic_[k]].dims, profiles_[p][k].min, profiles_[p][k].max);
      }
      if (fits) return static_cast<int32_t>(p);
    }
    return -1;
  }

  // This call's input shapes (or shape-input values), once they changed: the profile holding
  // them, each set on the context, every output's shape read back. A shape no profile holds is
  // refused naming the binding, its shape and each profile's bounds; nothing is set then. No
  // allocation.
  Error apply_shapes() {
    if (!dirty_) return Error::Ok;
    // no profiles: only a shape input's value changed (outputs are read again, nothing chosen)
    const int32_t p = profiles_.empty() ? profile_ : select_profile();
    if (p < 0) return refuse_profile();
    if (p != profile_) {
      if (!api_->set_profile(p)) {
        refuse("execute.shape_profile", "TensorRTBackend: %s refused optimization profile %d (%s)",
               api_->sdk(), p, api_->last_error());
        return Error::InvalidArgument;
      }
      profile_ = p;
    }
    for (size_t i : dynamic_) {
      const IoTensor& t = inputs_[i];
      if (!api_->set_input_shape(t.name.c_str(), t.dims)) {
        char buf[96];
        refuse("execute.shape_profile", "TensorRTBackend: %s refused shape %s for input '%s'",
               api_->sdk(), dims_c(t.dims, buf, sizeof buf), t.name.c_str());
        return Error::InvalidArgument;
      }
    }
    for (IoTensor& t : outputs_) {
      if (!t.dynamic) continue;
      const TrtDims got = api_->context_shape(t.name.c_str());
      if (!is_static(got) || got.nb != t.dims.nb) {
        char buf[96];
        refuse("execute.output_shape",
               "TensorRTBackend: %s gives output '%s' the shape %s for this call's inputs",
               api_->sdk(), t.name.c_str(), dims_c(got, buf, sizeof buf));
        return Error::Internal;
      }
      t.dims = got;
      t.nbytes = byte_size(t);
    }
    dirty_ = false;
    return Error::Ok;
  }

  Error refuse_profile() const {
    for (size_t k = 0; k < dynamic_.size(); ++k) {
      const IoTensor& t = inputs_[dynamic_[k]];
      bool held = false;
      for (const auto& bounds : profiles_)
        held = held || within(t.dims, bounds[k].min, bounds[k].max);
      if (held && dynamic_.size() > 1) continue;  // another input is the one out of bounds
      char shape[96], lo[96], hi[96], more[96] = "";
      if (profiles_.size() > 1)
        std::snprintf(more, sizeof more, " (and %zu more profiles)", profiles_.size() - 1);
      refuse("execute.shape_profile",
             "TensorRTBackend: TensorRT input '%s' has shape %s in this call, outside the "
             "engine's optimization profiles: profile 0 takes %s to %s%s",
             t.name.c_str(), dims_c(t.dims, shape, sizeof shape),
             dims_c(profiles_.empty() ? t.dims : profiles_[0][k].min, lo, sizeof lo),
             dims_c(profiles_.empty() ? t.dims : profiles_[0][k].max, hi, sizeof hi), more);
      return Error::InvalidArgument;
    }
    refuse("execute.shape_profile",
           "TensorRTBackend: this call's input shapes fit no single optimization profile of the "
           "engine together");
    return Error::InvalidArgument;
  }

  // Each output the engine aliases must be one the blob aliases to the same input, and each the
  // blob aliases one the engine does: the runtime binds an aliased output to its input's memory
  // (the caller's cache) and nothing else writes it, so a wrong record is a write lost or landed
  // in the wrong buffer. Refused rather than demoted to a copy-back: a disagreement means the
  // converters' record of this engine is wrong, and nothing else in the blob can then be trusted.
  Error verify_aliasing(const BlobInfo& info, Reason& why) {
    bool verified = true;
    for (const Binding& b : info.outputs) {
      const TrtAlias got = api_->aliased_input(b.name.c_str());
      if (!got.known) {
        verified = false;
        break;
      }
      const AliasedIO* want = nullptr;
      for (const AliasedIO& a : info.aliased_io) {
        if (a.output == b.name) want = &a;
      }
      const std::string engine_says = got.input ? "'" + std::string(got.input) + "'" : "none";
      const std::string blob_says = want ? "'" + want->input + "'" : "none";
      if (engine_says != blob_says) {
        return why.fail(Error::InvalidProgram, "tensorrt.aliasing",
                        "output binding '" + b.name + "' aliases input " + engine_says +
                            " in the " + api_->sdk() +
                            " engine (getAliasedInputTensor), but the "
                            "blob's aliased_io says " +
                            blob_says +
                            ": the recorded aliasing of this engine is wrong, and binding by it "
                            "would lose or misplace a cache write; re-export the .pte");
      }
    }
    if (!verified && !info.aliased_io.empty()) {
      ET_LOG(Info,
             "TensorRTBackend: %s cannot report which input an output aliases (before TensorRT "
             "10.15): the blob's aliased_io (%zu outputs) is used as recorded, unverified",
             api_->sdk(), info.aliased_io.size());
    }
    return Error::Ok;
  }

  // torch_tensorrt.save(weight_streaming_budget_per_engine=N): at most N bytes of weights stay
  // resident, the rest stream from host memory. Set before the execution context exists (TensorRT
  // cannot change it while one is active). An engine built without weight streaming ignores it,
  // saying so, as upstream's runtime does.
  Error stream_weights(const BlobInfo& info, Reason& why) {
    if (info.weight_streaming_budget < 0) return Error::Ok;
    const int64_t streamable = api_->streamable_weights();
    if (streamable <= 0) {
      ET_LOG(Info,
             "TensorRTBackend: weight_streaming_budget %lld ignored: the engine was built "
             "without weight streaming (enable_weight_streaming=True)",
             static_cast<long long>(info.weight_streaming_budget));
      return Error::Ok;
    }
    if (!api_->set_weight_streaming_budget(info.weight_streaming_budget)) {
      return why.fail(Error::InvalidArgument, "tensorrt.weight_streaming",
                      format("%s refused the weight streaming budget of %lld bytes (the engine "
                             "streams %lld bytes of weights): %s",
                             api_->sdk(), static_cast<long long>(info.weight_streaming_budget),
                             static_cast<long long>(streamable), api_->last_error()));
    }
    return Error::Ok;
  }

  Error resolve_inputs(const BlobInfo& info, Reason& why) {
    for (const Binding& b : info.inputs) {
      IoTensor t;
      Error e = resolve_type(b, TrtIo::Input, t, why);
      if (e == Error::Ok) e = resolve_input_shape(b, api_->engine_shape(b.name.c_str()), t, why);
      if (e != Error::Ok) return e;
      t.host = api_->host_input(b.name.c_str());
      if (t.host && (t.dynamic || t.nbytes > kHostInputBytes)) {
        return why.fail(Error::NotSupported, "tensorrt.shape_input",
                        format("TensorRT shape input '%s' is %s; this runtime binds shape inputs "
                               "of a static shape up to %zu bytes",
                               b.name.c_str(), t.text.c_str(), kHostInputBytes));
      }
      if (!t.dynamic && !api_->set_input_shape(b.name.c_str(), t.dims)) {
        return why.fail(Error::InvalidProgram, "tensorrt.shape",
                        std::string(api_->sdk()) + " refused shape " + dims_text(t.dims) +
                            " for input binding '" + b.name + "'");
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
      if (Error e = resolve_type(b, TrtIo::Output, t, why); e != Error::Ok) return e;
      const TrtDims got = api_->context_shape(b.name.c_str());  // inputs at their max_shape
      t.dynamic = b.known && !b.is_static();
      if (!is_static(got)) {
        return why.fail(Error::NotSupported, "tensorrt.dynamic_shape",
                        "TensorRT output '" + b.name + "' has the data-dependent shape " +
                            dims_text(got) + "; this runtime binds static shapes only");
      }
      bool same = !b.known || got.nb == static_cast<int32_t>(b.shape.size());
      for (int32_t k = 0; b.known && same && k < got.nb; ++k) {
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

  // `is_device_pointer`, asked only when the binding's address changed since the last call
  // (state in planned arenas keeps it): no driver query per binding per call.
  bool device_checked(const void*& last, const IoTensor& t, const char* side,
                      const void* data) const {
    if (data == last) return true;
    if (!api_->is_device_pointer(data)) {
      refuse("execute.host_pointer",
             "TensorRTBackend: %s '%s' (%s) is bound to host memory at %p; a TensorRT engine "
             "reads and writes device memory only (load the program with a device: "
             "tte::use_device)",
             side, t.name.c_str(), t.text.c_str(), data);
      return false;
    }
    last = data;
    return true;
  }

  // Direction and data type: the engine's, checked against a known binding's.
  Error resolve_type(const Binding& b, TrtIo want, IoTensor& t, Reason& why) {
    const char* side = want == TrtIo::Input ? "input" : "output";
    const char* name = b.name.c_str();
    if (api_->io_mode(name) != want) {
      return why.fail(
          Error::InvalidProgram, "tensorrt.direction",
          std::string("the TensorRT engine has no ") + side + " tensor '" + b.name + "'");
    }
    const int32_t engine_type = api_->data_type(name);
    DType d;
    if (!dtype_from_trt(engine_type, d)) {
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
    if (!api_->linear(name)) {
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
  Error resolve_input_shape(const Binding& b, const TrtDims& engine_dims, IoTensor& t,
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
    t.dynamic = !b.is_static();
    if (t.dynamic && !b.bounded_dynamic()) {
      return why.fail(Error::NotSupported, "tensorrt.dynamic_shape",
                      "input binding '" + b.name + "' has a dynamic shape " + b.describe() +
                          " and no max_shape; re-export the .pte with this torch-tensorrt-ext "
                          "(it records the bounds the program was planned for)");
    }
    // a dynamic dimension of the binding must be one of the engine's, a static one its size
    bool same = engine_dims.nb == static_cast<int32_t>(b.shape.size()) && b.shape.size() <= 8;
    for (int32_t k = 0; same && k < engine_dims.nb; ++k) {
      same = b.shape[k] < 0 ? engine_dims.d[k] < 0
                            : (engine_dims.d[k] < 0 || engine_dims.d[k] == b.shape[k]);
    }
    if (!same) {
      return why.fail(Error::InvalidProgram, "tensorrt.shape",
                      "TensorRT input '" + b.name + "' has shape " + dims_text(engine_dims) +
                          ", the binding says " + b.describe());
    }
    const std::vector<int64_t>& start = t.dynamic ? b.max_shape : b.shape;
    t.dims.nb = static_cast<int32_t>(start.size());
    for (size_t k = 0; k < start.size(); ++k) t.dims.d[k] = start[k];
    finish_tensor(t);
    return Error::Ok;
  }

  static void finish_tensor(IoTensor& t) {
    size_t n = dtype_size(t.dtype);
    for (int32_t k = 0; k < t.dims.nb; ++k) n *= static_cast<size_t>(t.dims.d[k]);
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

  struct Bounds {
    TrtDims min, max;
  };
  std::unique_ptr<TrtApi> api_;
  EngineKind kind_;
  std::vector<size_t> dynamic_;                // input bindings with a dynamic dimension
  std::vector<std::vector<Bounds>> profiles_;  // per profile, per dynamic_ entry
  int32_t profile_ = 0;                        // the context's
  bool dirty_ = false;                         // a dynamic input's shape changed: apply_shapes
  std::vector<const void*> checked_in_, checked_out_;  // last address verified per binding
  std::vector<IoTensor> inputs_, outputs_;
};

constexpr struct {
  int major, minor;
} kRtxCapabilities[] = {{7, 5}, {8, 6}, {8, 9}, {12, 0}, {12, 1}};

}  // namespace

Error check_rtx_device(int device, int major, int minor, Reason& why) {
  std::string supported;
  for (const auto& c : kRtxCapabilities) {
    if (c.major == major && c.minor == minor) return Error::Ok;
    supported +=
        (supported.empty() ? "" : ", ") + std::to_string(c.major) + "." + std::to_string(c.minor);
  }
  return why.fail(Error::NotSupported, "tensorrt.rtx_device",
                  format("the blob holds a TensorRT-RTX engine, and CUDA device %d has compute "
                         "capability %d.%d, which TensorRT-RTX does not run on (it supports %s); "
                         "run it on an RTX GPU, or export with TensorRT (torch-tensorrt) for this "
                         "device",
                         device, major, minor, supported.c_str()));
}

Result<std::unique_ptr<Engine>> create_tensorrt_engine_over(std::unique_ptr<TrtApi> api,
                                                            const BlobInfo& info, Reason& why) {
  auto engine = std::make_unique<TensorRTEngine>(std::move(api), info.engine_kind);
  Error e = engine->init(info, why);
  if (e != Error::Ok) return e;
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace tte
