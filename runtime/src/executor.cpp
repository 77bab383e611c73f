// One delegate's executor; see executor.h.
#include "executor.h"
#include "device.h"
#include "engine_factory.h"

#include "refusal.h"

#include <executorch/runtime/core/exec_aten/util/dim_order_util.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>

#include <cstdarg>
#include <cstdio>

namespace tte {
namespace {

using executorch::aten::Tensor;
using executorch::runtime::EValue;
using executorch::runtime::Span;

// "[1,2,8]" into `buf` (no allocation: execute-time messages); cut short if it does not fit.
template <class Dims>
const char* dims_text(const Dims& d, char* buf, size_t n) {
  size_t at = std::snprintf(buf, n, "[");
  for (size_t k = 0; k < d.size() && at < n; ++k) {
    at += std::snprintf(buf + at, n - at, k ? ",%d" : "%d", static_cast<int>(d[k]));
  }
  if (at < n) std::snprintf(buf + at, n - at, "]");
  return buf;
}

// A dynamic binding's tensor has its rank and its static dimensions.
bool fits_dynamic(const Tensor& t, const Binding& b) {
  const auto sizes = t.sizes();
  bool same = sizes.size() == b.shape.size();
  for (size_t k = 0; same && k < sizes.size(); ++k) same = b.shape[k] < 0 || sizes[k] == b.shape[k];
  return same;
}

// A delegate tensor for `b`: right dtype, dense in the default dim order, and exactly the
// binding's bytes — or, for a dynamic binding, its rank and static dims (the bytes are then the
// tensor's); any dtype and shape for an unknown binding (it defines them). Refuses what is wrong.
bool check_tensor(const EValue* v, const Binding& b, const char* role, size_t arg) {
  const char* name = b.name.c_str();
  char buf[160];
  if (v == nullptr || !v->isTensor()) {
    refuse("execute.not_tensor", "TensorRTBackend: delegate %s %zu (binding '%s') is not a tensor",
           role, arg, name);
    return false;
  }
  const Tensor& t = v->toTensor();
  if (!executorch::runtime::is_contiguous_dim_order(t.dim_order().data(), t.dim())) {
    refuse("execute.dim_order",
           "TensorRTBackend: delegate %s %zu (binding '%s') has dim order %s; the engine reads "
           "its bindings as contiguous tensors in dim order 0..n-1",
           role, arg, name, dims_text(t.dim_order(), buf, sizeof buf));
    return false;
  }
  if (b.known && t.scalar_type() != dtype_scalar_type(b.dtype)) {
    refuse("execute.dtype",
           "TensorRTBackend: delegate %s %zu (binding '%s') has scalar type %s, the binding is %s",
           role, arg, name, executorch::runtime::toString(t.scalar_type()), dtype_name(b.dtype));
    return false;
  }
  if (b.is_static() && t.nbytes() != b.nbytes()) {
    refuse("execute.nbytes",
           "TensorRTBackend: delegate %s %zu (binding '%s') holds %zu bytes, the binding %s needs "
           "%zu",
           role, arg, name, t.nbytes(), b.describe().c_str(), b.nbytes());
    return false;
  }
  if (b.known && !b.is_static() && !fits_dynamic(t, b)) {
    refuse("execute.shape",
           "TensorRTBackend: delegate %s %zu (binding '%s') has shape %s, the binding is %s", role,
           arg, name, dims_text(t.sizes(), buf, sizeof buf), b.describe().c_str());
    return false;
  }
  return true;
}

constexpr size_t kMaxRank = 16;  // ExecuTorch's tensors have at most 16 dimensions

struct ShapeText {
  char text[160];
};
ShapeText shape_of(const Tensor& t) {
  ShapeText s;
  dims_text(t.sizes(), s.text, sizeof s.text);
  return s;
}

// A dynamic input's tensor fits the binding's max_shape (when the blob gives one): the engine
// was built, and the program planned, for no larger.
bool within_bounds(const Tensor& t, const Binding& b, size_t arg) {
  if (b.max_shape.empty()) return true;
  const auto sizes = t.sizes();
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] <= b.max_shape[k]) continue;
    char bound[160];
    refuse("execute.shape_bounds",
           "TensorRTBackend: delegate input %zu (binding '%s') has shape %s, beyond the binding's "
           "max_shape %s (dimension %zu); the engine was built for no larger",
           arg, b.name.c_str(), shape_of(t).text, dims_text(b.max_shape, bound, sizeof bound), k);
    return false;
  }
  return true;
}

// An engine call failed: refuse with `fmt`, followed by what the engine itself refused with in
// this call, if anything (execute cleared the refusal on entry), under the engine's check id when
// it gave one, else `check`. No heap.
void refuse_for_engine(const char* check, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
void refuse_for_engine(const char* check, const char* fmt, ...) {
  char reason[kRefusalBytes / 2], what[kRefusalBytes / 2];
  std::snprintf(reason, sizeof reason, "%s", last_refusal());
  const char* engine_check = last_check();
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  refuse(engine_check[0] ? engine_check : check, "%s%s%s", what, reason[0] ? ": " : "", reason);
}

// Finishes `engine` after a refused run or copy, keeping that refusal: a finish that fails too
// (a sticky CUDA error fails every later call) refuses on its own and would otherwise replace the
// refusal that says what went wrong first. No heap.
void finish_keeping_refusal(Engine& engine) {
  char reason[kRefusalBytes];
  std::snprintf(reason, sizeof reason, "%s", last_refusal());
  const char* check = last_check();
  (void)engine.finish();
  record_refusal(check, reason);
}

}  // namespace

Error resolve_unknown_bindings(BlobInfo& info, const Engine& engine, Reason& why) {
  bool resolved = false;
  for (auto* side : {&info.inputs, &info.outputs}) {
    for (Binding& b : *side) {
      DType dtype;
      std::vector<int64_t> shape;
      if (b.known || !engine.binding_type(b.is_input, b.index, dtype, shape)) continue;
      b.dtype = dtype;
      b.shape = std::move(shape);
      b.known = true;
      resolved = true;
    }
  }
  if (resolved && !validate_blob(info, why)) {
    why.text = std::string("with the dtypes and shapes the ") + engine.kind() +
               " engine gives the bindings the blob leaves unknown: " + why.text;
    return Error::InvalidProgram;
  }
  return Error::Ok;
}

Error DelegateExecutor::init(const void* blob, size_t size, Reason& why,
                             const std::string& target_device,
                             const executorch::runtime::NamedDataMap* named_data) {
  auto info = parse_blob(blob, size, why);
  if (!info.ok()) return info.error();
  info->target_device = target_device;
  info->named_data = named_data;
  auto engine = create_engine(info.get(), why);
  if (!engine.ok()) {
    info_ = std::move(info.get());  // names the delegate in the refusal
    has_info_ = true;
    return engine.error();
  }
  return init(std::move(info.get()), std::move(engine.get()), why);
}

Error DelegateExecutor::init(BlobInfo info, std::unique_ptr<Engine> engine, Reason& why) {
  info_ = std::move(info);
  has_info_ = true;
  engine_ = std::move(engine);
  if (Error e = resolve_unknown_bindings(info_, *engine_, why); e != Error::Ok) return e;
  auto plan = plan_bindings(info_, why);  // with the engine's types for unknown bindings
  if (!plan.ok()) return plan.error();
  plan_ = std::move(plan.get());
  return allocate_call_state(why);
}

Error DelegateExecutor::allocate_call_state(Reason& why) {
  for (size_t k = 0; k < plan_.scratch_nbytes.size(); ++k) {
    auto p = engine_->allocate_scratch(plan_.scratch_nbytes[k], why);
    if (!p.ok()) {
      for (const CopyStep& c : plan_.copies) {  // the copy-back output this scratch serves
        if (c.kind == CopyKind::ScratchToInput && c.scratch == k) {
          why.text = "copy-back output '" + info_.outputs[c.output].name + "': " + why.text;
        }
      }
      return p.error();
    }
    scratch_.push_back(p.get());
  }
  for (const CopyStep& c : plan_.copies) {
    CopyCounter* counter = copy_counter(c.counter_key);
    if (counter == nullptr) {
      return why.fail(Error::MemoryAllocationFailed, "runtime.out_of_memory",
                      "cannot allocate the copy counter for '" + c.counter_key + "'");
    }
    counters_.push_back(counter);
  }
  copy_memo_.assign(plan_.copies.size(), CopyMemo{});
  batch_.assign(plan_.copies.size(), CopyRange{});
  input_addr_.assign(info_.inputs.size(), nullptr);
  input_nbytes_.assign(info_.inputs.size(), 0);
  delegate_out_addr_.assign(info_.delegate_outputs.size(), nullptr);
  delegate_out_nbytes_.assign(info_.delegate_outputs.size(), 0);
  delegate_out_tensor_.assign(info_.delegate_outputs.size(), nullptr);
  input_dynamic_.assign(info_.inputs.size(), 0);
  // A dynamic binding with a max_shape is shaped per call; one without (TR02) stays sized by its
  // tensor alone, as before max_shape existed.
  for (const Binding& b : info_.inputs) {
    input_dynamic_[b.index] = b.bounded_dynamic();
  }
  output_resized_.assign(plan_.delegate_output.size(), 0);
  for (size_t j = 0; j < plan_.delegate_output.size(); ++j) {
    const Binding& b = info_.outputs[plan_.delegate_output[j]];
    output_resized_[j] = b.bounded_dynamic();
  }
  return Error::Ok;
}

Error DelegateExecutor::prepare_args(Span<EValue*> args) {
  const size_t n_in = plan_.arg_input.size(), n_out = plan_.delegate_output.size();
  if (args.size() != n_in + n_out) {
    refuse("execute.arity",
           "TensorRTBackend: the delegate call has %zu arguments, the blob declares %zu inputs + "
           "%zu outputs",
           args.size(), n_in, n_out);
    return Error::InvalidArgument;
  }
  Error e = bind_inputs(args);
  if (e == Error::Ok) e = bind_delegate_outputs(args);
  if (e == Error::Ok) e = check_aliases(args);
  if (e == Error::Ok) e = bind_engine_outputs();
  return e;
}

Error DelegateExecutor::bind_inputs(Span<EValue*> args) {
  for (size_t i = 0; i < plan_.arg_input.size(); ++i) {
    const Binding& b = info_.inputs[plan_.arg_input[i]];
    if (!check_tensor(args[i], b, "input", i)) return Error::InvalidArgument;
    const Tensor& t = args[i]->toTensor();
    if (input_dynamic_[b.index]) {
      if (!within_bounds(t, b, i)) return Error::InvalidArgument;
      const Error e = engine_->set_input_shape(b.index, t.sizes().data(), t.sizes().size());
      if (e != Error::Ok) {
        refuse_for_engine("execute.engine_shape",
                          "TensorRTBackend: %s engine refused input binding '%s' shape %s",
                          engine_->kind(), b.name.c_str(), shape_of(t).text);
        return e;
      }
    }
    input_addr_[b.index] = t.mutable_data_ptr();
    input_nbytes_[b.index] = t.nbytes();
    const Error e = engine_->bind_input(b.index, input_addr_[b.index], t.nbytes());
    if (e != Error::Ok) {
      refuse_for_engine("execute.engine_bind",
                        "TensorRTBackend: %s engine refused input binding '%s' (error 0x%x)",
                        engine_->kind(), b.name.c_str(), static_cast<unsigned>(e));
      return e;
    }
  }
  return Error::Ok;
}

// A delegate output with a max_shape is bound at its bound (the memory planned for it) — or at
// the shape the engine already gives it (TensorRT) — and resized to the engine's shape after the
// run (resize_outputs_after_run). A program may hold such an output in a static tensor (exported
// without that dimension dynamic, over an engine built with it): that tensor keeps its shape, the
// memory the program planned, and the engine's output must come out that shape.
Error DelegateExecutor::bind_delegate_outputs(Span<EValue*> args) {
  const size_t n_in = plan_.arg_input.size();
  for (size_t j = 0; j < plan_.delegate_output.size(); ++j) {
    const size_t o = plan_.delegate_output[j];
    const Binding& b = info_.outputs[o];
    if (!check_tensor(args[n_in + j], b, "output", j)) return Error::InvalidArgument;
    Tensor t = args[n_in + j]->toTensor();
    delegate_out_tensor_[j] = t.unsafeGetTensorImpl();
    if (output_resized_[j]) {
      int32_t sizes[kMaxRank];
      const size_t rank = b.shape.size();
      const bool known = engine_->output_shape(o, sizes, rank);
      if (!known && t.shape_dynamism() == executorch::aten::TensorShapeDynamism::STATIC) {
        // its shape stays; the engine's is checked after the run
      } else {
        if (!known) {
          for (size_t k = 0; k < rank; ++k) sizes[k] = static_cast<int32_t>(b.max_shape[k]);
        }
        if (Error e = resize_delegate_output(j, sizes, rank); e != Error::Ok) return e;
      }
    }
    delegate_out_addr_[j] = t.mutable_data_ptr();
    delegate_out_nbytes_[j] = t.nbytes();
  }
  return Error::Ok;
}

Error DelegateExecutor::resize_delegate_output(size_t j, const int32_t* sizes, size_t rank) {
  Tensor t(delegate_out_tensor_[j]);
  const Error e = executorch::runtime::resize_tensor(
      t, executorch::aten::ArrayRef<executorch::aten::SizesType>(sizes, rank));
  if (e == Error::Ok) return Error::Ok;
  const Binding& b = info_.outputs[plan_.delegate_output[j]];
  char want[160], bound[160];
  if (t.shape_dynamism() == executorch::aten::TensorShapeDynamism::STATIC) {
    refuse("execute.output_resize",
           "TensorRTBackend: delegate output %zu (binding '%s', max_shape %s) has shape %s at "
           "this call, but the program holds it in a static tensor of shape %s (exported without "
           "the dynamic dimension the engine has; export with dynamic_shapes to take other "
           "shapes)",
           j, b.name.c_str(), dims_text(b.max_shape, bound, sizeof bound),
           dims_text(executorch::runtime::Span<const int32_t>(const_cast<int32_t*>(sizes), rank),
                     want, sizeof want),
           shape_of(t).text);
    return e;
  }
  refuse("execute.output_resize",
         "TensorRTBackend: delegate output %zu (binding '%s', max_shape %s) cannot take shape %s: "
         "the program planned less memory for it (the .pte and its blob disagree; re-export it)",
         j, b.name.c_str(), dims_text(b.max_shape, bound, sizeof bound),
         dims_text(executorch::runtime::Span<const int32_t>(const_cast<int32_t*>(sizes), rank),
                   want, sizeof want));
  return e;
}

Error DelegateExecutor::resize_outputs_after_run() {
  for (size_t j = 0; j < plan_.delegate_output.size(); ++j) {
    if (!output_resized_[j]) continue;
    const size_t o = plan_.delegate_output[j];
    int32_t sizes[kMaxRank];
    const size_t rank = info_.outputs[o].shape.size();
    if (!engine_->output_shape(o, sizes, rank)) {
      refuse("execute.output_shape",
             "TensorRTBackend: the %s engine did not say the shape of dynamic output binding "
             "'%s' after its run",
             engine_->kind(), info_.outputs[o].name.c_str());
      return Error::Internal;
    }
    if (Error e = resize_delegate_output(j, sizes, rank); e != Error::Ok) return e;
    delegate_out_nbytes_[j] = Tensor(delegate_out_tensor_[j]).nbytes();
  }
  return Error::Ok;
}

Error DelegateExecutor::check_aliases(Span<EValue*> args) const {
  const size_t n_in = plan_.arg_input.size();
  for (const AliasCheck& c : plan_.alias_checks) {
    const AliasedIO& a = info_.aliased_io[c.pair];
    const size_t out_arg = n_in + c.delegate_output;
    const EValue* vo = out_arg < args.size() ? args[out_arg] : nullptr;
    const EValue* vi = c.input_arg < args.size() ? args[c.input_arg] : nullptr;
    if (vo == nullptr || !vo->isTensor() || vi == nullptr || !vi->isTensor()) {
      refuse("execute.not_tensor",
             "TensorRTBackend: aliased pair '%s' -> '%s': delegate argument is not a tensor",
             a.output.c_str(), a.input.c_str());
      return Error::InvalidArgument;
    }
    const Tensor& to = vo->toTensor();
    const Tensor& ti = vi->toTensor();
    if (to.scalar_type() == ti.scalar_type() && to.nbytes() == ti.nbytes()) continue;
    const char* left = !c.output_known && !c.input_known ? "their dtype/shape"
                       : !c.input_known                  ? "the input's dtype/shape"
                       : !c.output_known                 ? "the output's dtype/shape"
                                                         : "their dynamic dimensions";
    refuse("execute.alias_mismatch",
           "TensorRTBackend: aliased pair '%s' -> '%s' differs at execute: output tensor is %s "
           "(%zu bytes), input tensor is %s (%zu bytes); the blob leaves %s to the tensors",
           a.output.c_str(), a.input.c_str(), executorch::runtime::toString(to.scalar_type()),
           to.nbytes(), executorch::runtime::toString(ti.scalar_type()), ti.nbytes(), left);
    return Error::InvalidArgument;
  }
  return Error::Ok;
}

Error DelegateExecutor::bind_engine_outputs() {
  for (size_t o = 0; o < plan_.outputs.size(); ++o) {
    const OutputSlot& s = plan_.outputs[o];
    void* addr = nullptr;
    size_t nbytes = s.nbytes;  // unless the blob leaves the size to the tensor
    switch (s.target) {
      case OutputTarget::DelegateOutput:
        addr = delegate_out_addr_[s.delegate_output];
        if (s.sized_by_tensor) nbytes = delegate_out_nbytes_[s.delegate_output];
        break;
      case OutputTarget::AliasedInput:
        addr = input_addr_[s.input];
        if (s.sized_by_tensor) nbytes = input_nbytes_[s.input];
        break;
      case OutputTarget::Scratch: addr = scratch_[s.scratch]; break;  // static (planned)
    }
    const Error e = engine_->bind_output(o, addr, nbytes);
    if (e != Error::Ok) {
      refuse_for_engine("execute.engine_bind",
                        "TensorRTBackend: %s engine refused output binding '%s' (%s, error 0x%x)",
                        engine_->kind(), info_.outputs[o].name.c_str(),
                        output_target_name(s.target), static_cast<unsigned>(e));
      return e;
    }
  }
  return Error::Ok;
}

Error DelegateExecutor::forward() {
  Error e = engine_->run();
  if (e != Error::Ok) {
    refuse_for_engine("execute.engine_run", "TensorRTBackend: %s engine run failed (error 0x%x)",
                      engine_->kind(), static_cast<unsigned>(e));
    finish_keeping_refusal(*engine_);  // what it enqueued before failing must not outlive the call
    return e;
  }
  e = resize_outputs_after_run();
  if (e == Error::Ok) e = copy_outputs();
  if (e != Error::Ok) {
    finish_keeping_refusal(*engine_);  // the run (and earlier copies) may still be writing
    return e;
  }
  e = engine_->finish();
  if (e != Error::Ok) {
    refuse_for_engine("execute.finish", "TensorRTBackend: %s engine did not finish (error 0x%x)",
                      engine_->kind(), static_cast<unsigned>(e));
  }
  return e;
}

// The call's copies as ranges; when every one stays in device memory (the memo says so) and
// there are several, one batched device operation, else one copy each (host or link copies).
Error DelegateExecutor::copy_outputs() {
  bool all_device = plan_.copies.size() > 1;
  for (size_t k = 0; k < plan_.copies.size(); ++k) {
    const CopyStep& c = plan_.copies[k];
    const bool to_input = c.kind != CopyKind::InputToDelegateOutput;
    void* dst = to_input ? input_addr_[c.input] : delegate_out_addr_[c.delegate_output];
    const void* src = c.kind == CopyKind::ScratchToInput ? scratch_[c.scratch]
                      : c.kind == CopyKind::DelegateOutputToInput
                          ? delegate_out_addr_[c.delegate_output]
                          : input_addr_[c.input];
    // An aliased output the blob does not size is its delegate tensor's size (== its input's,
    // compared by check_aliases).
    const size_t nbytes = c.sized_by_tensor ? delegate_out_nbytes_[c.delegate_output] : c.nbytes;
    if (batch_[k].dst != dst || batch_[k].src != src || batch_[k].nbytes != nbytes) {
      batch_checked_ = false;
    }
    batch_[k] = CopyRange{dst, const_cast<void*>(src), nbytes};
    all_device = all_device && copy_path(k, dst, src) == CopyPath::Device && dst != src;
  }
  if (!all_device) return copy_one_by_one();
  if (Error e = check_batch(); e != Error::Ok) return e;
  if (Error e = engine_->copy_batch(batch_.data(), batch_.size()); e != Error::Ok) {
    refuse_for_engine("execute.copy",
                      "TensorRTBackend: the batched copy of %zu outputs into "
                      "their buffers failed (error 0x%x)",
                      batch_.size(), static_cast<unsigned>(e));
    return e;
  }
  for (size_t k = 0; k < batch_.size(); ++k) {
    count_copy(counters_[k], batch_[k].nbytes, CopyPath::Device);
  }
  return Error::Ok;
}

Error DelegateExecutor::copy_one_by_one() {
  for (size_t k = 0; k < plan_.copies.size(); ++k) {
    const CopyRange& r = batch_[k];
    const Error e = engine_->copy(r.dst, r.src, r.nbytes);
    if (e != Error::Ok) {
      refuse_for_engine("execute.copy",
                        "TensorRTBackend: copying output '%s' into '%s' failed (error 0x%x)",
                        info_.outputs[plan_.copies[k].output].name.c_str(),
                        plan_.copies[k].counter_key.c_str(), static_cast<unsigned>(e));
      return e;
    }
    count_copy(counters_[k], r.nbytes, copy_path(k, r.dst, r.src));
  }
  return Error::Ok;
}

// A batch runs its copies in no particular order: no destination may overlap another copy's
// source or destination. Checked when the addresses change (planned arenas keep them: once).
Error DelegateExecutor::check_batch() {
  if (batch_checked_) return Error::Ok;
  auto overlap = [](const void* a, size_t na, const void* b, size_t nb) {
    const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
    return x < y + nb && y < x + na;
  };
  for (size_t i = 0; i < batch_.size(); ++i) {
    for (size_t j = 0; j < batch_.size(); ++j) {
      const CopyRange &a = batch_[i], &b = batch_[j];
      if ((i != j && overlap(a.dst, a.nbytes, b.dst, b.nbytes)) ||
          overlap(a.dst, a.nbytes, b.src, b.nbytes)) {
        refuse_for_engine("execute.copy_overlap",
                          "TensorRTBackend: the copy into '%s' overlaps the copy %s '%s'; the "
                          "buffers' memory must not overlap (nothing was copied)",
                          plan_.copies[i].counter_key.c_str(),
                          i == j ? "from its own source" : "of",
                          plan_.copies[j].counter_key.c_str());
        return Error::InvalidProgram;
      }
    }
  }
  batch_checked_ = true;
  return Error::Ok;
}

// Where copy `k`'s bytes went — the device's own answer (no dereference), asked again only when
// the copy's addresses changed since the last call (state in planned arenas keeps them): D2D,
// across the link, or on the host.
CopyPath DelegateExecutor::copy_path(size_t k, const void* dst, const void* src) {
  CopyMemo& m = copy_memo_[k];
  if (m.dst != dst || m.src != src) {
    const Device* d = active_device();
    const int on_device = (d != nullptr && d->owns(dst)) + (d != nullptr && d->owns(src));
    m = CopyMemo{dst, src,
                 on_device == 2 ? CopyPath::Device
                 : on_device    ? CopyPath::Link
                                : CopyPath::Host};
  }
  return m.path;
}

}  // namespace tte
