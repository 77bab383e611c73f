// The ExecuTorch backend "TensorRTBackend"; see tte/backend.h.
#include <tte/backend.h>
#include <tte/blob.h>
#include <tte/counters.h>
#include <tte/engine.h>
#include <tte/plan.h>
#include <tte/refusal.h>

#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/platform/log.h>

#include <cstdarg>
#include <cstdio>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace tte {
namespace {

using executorch::aten::Tensor;
using executorch::runtime::ArrayRef;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::CompileSpec;
using executorch::runtime::DelegateHandle;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Span;

// Everything one delegate instance needs, built by init; execute only reads/writes in place.
struct Delegate {
  BlobInfo info;  // names for messages; `engine` points into the processed segment
  BindingPlan plan;
  std::unique_ptr<Engine> engine;
  CallState state;
};

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

// A delegate tensor for `b`: right dtype, dense in the default dim order, and exactly the
// binding's bytes — or, for a dynamic binding, its rank and static dims (the bytes are then the
// tensor's); any dtype and shape for an unknown binding (it defines them). Logs what is wrong.
bool check_tensor(const EValue* v, const Binding& b, const char* role, size_t arg) {
  if (v == nullptr || !v->isTensor()) {
    refuse("TensorRTBackend: delegate %s %zu (binding '%s') is not a tensor", role, arg,
           b.name.c_str());
    return false;
  }
  const Tensor& t = v->toTensor();
  const auto dim_order = t.dim_order();
  for (size_t k = 0; k < dim_order.size(); ++k) {
    if (dim_order[k] != k) {
      char buf[96];
      refuse(
          "TensorRTBackend: delegate %s %zu (binding '%s') has dim order %s; the "
          "engine reads its bindings as contiguous tensors in dim order 0..n-1",
          role, arg, b.name.c_str(), dims_text(dim_order, buf, sizeof buf));
      return false;
    }
  }
  if (b.known && t.scalar_type() != dtype_scalar_type(b.dtype)) {
    refuse(
        "TensorRTBackend: delegate %s %zu (binding '%s') has scalar type %s, the "
        "binding is %s",
        role, arg, b.name.c_str(), executorch::runtime::toString(t.scalar_type()),
        dtype_name(b.dtype));
    return false;
  }
  if (b.is_static() && t.nbytes() != b.nbytes()) {
    refuse(
        "TensorRTBackend: delegate %s %zu (binding '%s') holds %zu bytes, the binding "
        "%s needs %zu",
        role, arg, b.name.c_str(), t.nbytes(), b.describe().c_str(), b.nbytes());
    return false;
  }
  if (b.known && !b.is_static()) {  // dynamic: the rank and the static dims must agree
    const auto sizes = t.sizes();
    bool same = sizes.size() == b.shape.size();
    for (size_t k = 0; same && k < sizes.size(); ++k) {
      same = b.shape[k] < 0 || sizes[k] == b.shape[k];
    }
    if (!same) {
      char buf[160];
      refuse(
          "TensorRTBackend: delegate %s %zu (binding '%s') has shape %s, the binding "
          "is %s",
          role, arg, b.name.c_str(), dims_text(sizes, buf, sizeof buf), b.describe().c_str());
      return false;
    }
  }
  return true;
}

// Which delegate a refusal is about: its method, size and (once read) its bindings.
std::string delegate_label(const BackendInitContext& context, size_t size, const BlobInfo* info) {
  const char* method = context.get_method_name();
  std::string s = format("delegate of method '%s': %zu-byte blob", method ? method : "?", size);
  if (info == nullptr) return s;
  s += format(" %s, bindings", info->magic);
  for (size_t i = 0; i < info->inputs.size(); ++i) {
    s += (i ? ", '" : " '") + info->inputs[i].name + "'";
  }
  s += " ->";
  for (size_t i = 0; i < info->outputs.size(); ++i) {
    s += (i ? ", '" : " '") + info->outputs[i].name + "'";
  }
  return s;
}

// An engine call failed: refuse with `fmt`, followed by what the engine itself refused with in
// this call, if anything (execute cleared the refusal on entry). No heap.
void refuse_for_engine(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void refuse_for_engine(const char* fmt, ...) {
  char reason[kRefusalBytes / 2], what[kRefusalBytes / 2];
  std::snprintf(reason, sizeof reason, "%s", last_refusal());
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  refuse("%s%s%s", what, reason[0] ? ": " : "", reason);
}

Error fail_init(Error e, const std::string& why, const std::string& label) {
  refuse("TensorRTBackend: init refused the delegate blob: %s (%s)", why.c_str(), label.c_str());
  return e;
}

}  // namespace

Error resolve_unknown_bindings(BlobInfo& info, const Engine& engine, std::string& why) {
  bool resolved = false;
  for (auto* side : {&info.inputs, &info.outputs}) {
    for (Binding& b : *side) {
      if (b.known) continue;
      DType dtype;
      std::vector<int64_t> shape;
      if (!engine.binding_type(b.is_input, b.index, dtype, shape)) continue;
      b.dtype = dtype;
      b.shape = std::move(shape);
      b.known = true;
      resolved = true;
    }
  }
  if (resolved && !validate_blob(info, why)) {
    why = std::string("with the dtypes and shapes the ") + engine.kind() +
          " engine gives the "
          "bindings the blob leaves unknown: " +
          why;
    return Error::InvalidProgram;
  }
  return Error::Ok;
}

Error check_unknown_aliases(const BlobInfo& info, const BindingPlan& plan, Span<EValue*> args) {
  const size_t n_in = plan.arg_input.size();
  for (const AliasCheck& c : plan.alias_checks) {
    const AliasedIO& a = info.aliased_io[c.pair];
    const size_t out_arg = n_in + c.delegate_output;
    const EValue* vo = out_arg < args.size() ? args[out_arg] : nullptr;
    const EValue* vi = c.input_arg < args.size() ? args[c.input_arg] : nullptr;
    if (vo == nullptr || !vo->isTensor() || vi == nullptr || !vi->isTensor()) {
      refuse(
          "TensorRTBackend: aliased pair '%s' -> '%s': delegate argument is not a "
          "tensor",
          a.output.c_str(), a.input.c_str());
      return Error::InvalidArgument;
    }
    const Tensor& to = vo->toTensor();
    const Tensor& ti = vi->toTensor();
    if (to.scalar_type() != ti.scalar_type() || to.nbytes() != ti.nbytes()) {
      const char* left = !c.output_known && !c.input_known ? "their dtype/shape"
                         : !c.input_known                  ? "the input's dtype/shape"
                         : !c.output_known                 ? "the output's dtype/shape"
                                                           : "their dynamic dimensions";
      refuse(
          "TensorRTBackend: aliased pair '%s' -> '%s' differs at execute: output "
          "tensor is %s (%zu bytes), input tensor is %s (%zu bytes); the blob leaves %s "
          "to the tensors",
          a.output.c_str(), a.input.c_str(), executorch::runtime::toString(to.scalar_type()),
          to.nbytes(), executorch::runtime::toString(ti.scalar_type()), ti.nbytes(), left);
      return Error::InvalidArgument;
    }
  }
  return Error::Ok;
}

Error run_and_copy(Engine& engine, const BlobInfo& info, const BindingPlan& plan,
                   const CallState& st) {
  Error e = engine.run();
  if (e != Error::Ok) {
    refuse_for_engine("TensorRTBackend: %s engine run failed (error 0x%x)", engine.kind(),
                      static_cast<unsigned>(e));
    (void)engine.finish();  // whatever it enqueued before failing must not outlive the call
    return e;
  }
  for (size_t k = 0; k < plan.copies.size(); ++k) {
    const CopyStep& c = plan.copies[k];
    const bool to_input = c.kind == CopyKind::ScratchToInput;
    void* dst = to_input ? st.input_addr[c.input] : st.delegate_out_addr[c.delegate_output];
    const void* src = to_input ? st.scratch[c.scratch] : st.input_addr[c.input];
    // An aliased output the blob does not size is its delegate tensor's size (== its input's,
    // compared by check_unknown_aliases).
    const size_t nbytes = c.sized_by_tensor ? st.delegate_out_nbytes[c.delegate_output] : c.nbytes;
    e = engine.copy(dst, src, nbytes);
    if (e != Error::Ok) {
      refuse("TensorRTBackend: copying output '%s' into '%s' failed (error 0x%x)",
             info.outputs[c.output].name.c_str(), c.counter_key.c_str(), static_cast<unsigned>(e));
      (void)engine.finish();  // the run (and earlier copies) may still be writing
      return e;
    }
    count_copy(st.counters[k], nbytes);
  }
  e = engine.finish();
  if (e != Error::Ok) {
    refuse("TensorRTBackend: %s engine did not finish (error 0x%x)", engine.kind(),
           static_cast<unsigned>(e));
    return e;
  }
  return Error::Ok;
}

bool TensorRTBackend::is_available() const { return true; }

Result<DelegateHandle*> TensorRTBackend::init(BackendInitContext& context,
                                              FreeableBuffer* processed,
                                              ArrayRef<CompileSpec> compile_specs) const {
  (void)last_refusal();  // the thread's refusal buffer exists before any execute writes it
  if (processed == nullptr || processed->data() == nullptr) {
    return fail_init(Error::InvalidArgument, "no processed bytes",
                     delegate_label(context, 0, nullptr));
  }
  try {  // init allocates (strings, vectors, the engine): no exception may reach ExecuTorch
    return init_delegate(context, *processed);
  } catch (const std::exception& e) {
    return fail_init(Error::MemoryAllocationFailed, std::string("out of memory (") + e.what() + ")",
                     "?");
  }
}

Result<DelegateHandle*> TensorRTBackend::init_delegate(BackendInitContext& context,
                                                       FreeableBuffer& processed) const {
  std::string why;
  auto info = parse_blob(processed.data(), processed.size(), why);
  if (!info.ok()) {
    return fail_init(info.error(), why, delegate_label(context, processed.size(), nullptr));
  }
  const std::string label = delegate_label(context, processed.size(), &info.get());
  auto engine = create_engine(info.get(), why);
  if (!engine.ok()) return fail_init(engine.error(), why, label);
  if (Error e = resolve_unknown_bindings(info.get(), *engine.get(), why); e != Error::Ok) {
    return fail_init(e, why, label);
  }
  auto plan = plan_bindings(info.get(), why);  // with the engine's types for unknown bindings
  if (!plan.ok()) return fail_init(plan.error(), why, label);

  std::unique_ptr<Delegate> d(new (std::nothrow) Delegate());
  if (!d) {
    return fail_init(Error::MemoryAllocationFailed, "cannot allocate the delegate state", label);
  }
  d->info = std::move(info.get());
  d->plan = std::move(plan.get());
  d->engine = std::move(engine.get());
  CallState& st = d->state;
  for (size_t k = 0; k < d->plan.scratch_nbytes.size(); ++k) {
    auto p = d->engine->allocate_scratch(d->plan.scratch_nbytes[k], why);
    if (!p.ok()) {
      for (const CopyStep& c : d->plan.copies) {  // the copy-back output this scratch serves
        if (c.kind == CopyKind::ScratchToInput && c.scratch == k) {
          why = "copy-back output '" + d->info.outputs[c.output].name + "': " + why;
        }
      }
      return fail_init(p.error(), why, label);
    }
    st.scratch.push_back(p.get());
  }
  for (const CopyStep& c : d->plan.copies) {
    CopyCounter* counter = copy_counter(c.counter_key);
    if (counter == nullptr) {
      return fail_init(Error::MemoryAllocationFailed,
                       "cannot allocate the copy counter for '" + c.counter_key + "'", label);
    }
    st.counters.push_back(counter);
  }
  st.input_addr.assign(d->info.inputs.size(), nullptr);
  st.input_nbytes.assign(d->info.inputs.size(), 0);
  st.delegate_out_addr.assign(d->info.delegate_outputs.size(), nullptr);
  st.delegate_out_nbytes.assign(d->info.delegate_outputs.size(), 0);
  // `processed` is deliberately not freed: the engine payload may point into it, and ExecuTorch
  // keeps it until the delegate is destroyed.
  return static_cast<DelegateHandle*>(d.release());
}

Error TensorRTBackend::execute(BackendExecutionContext& context, DelegateHandle* handle,
                               Span<EValue*> args) const {
  auto* d = static_cast<Delegate*>(handle);
  if (d == nullptr) return Error::InvalidState;
  clear_refusal();  // what this call refuses, if anything, is what last_refusal() then says
  const BindingPlan& plan = d->plan;
  const size_t n_in = plan.arg_input.size(), n_out = plan.delegate_output.size();
  if (args.size() != n_in + n_out) {
    refuse(
        "TensorRTBackend: the delegate call has %zu arguments, the blob declares %zu "
        "inputs + %zu outputs",
        args.size(), n_in, n_out);
    return Error::InvalidArgument;
  }
  Engine& engine = *d->engine;
  CallState& st = d->state;
  for (size_t i = 0; i < n_in; ++i) {
    const Binding& b = d->info.inputs[plan.arg_input[i]];
    if (!check_tensor(args[i], b, "input", i)) return Error::InvalidArgument;
    const Tensor& t = args[i]->toTensor();
    void* addr = t.mutable_data_ptr();
    st.input_addr[b.index] = addr;
    st.input_nbytes[b.index] = t.nbytes();
    Error e = engine.bind_input(b.index, addr, t.nbytes());
    if (e != Error::Ok) {
      refuse_for_engine("TensorRTBackend: %s engine refused input binding '%s' (error 0x%x)",
                        engine.kind(), b.name.c_str(), static_cast<unsigned>(e));
      return e;
    }
  }
  for (size_t j = 0; j < n_out; ++j) {
    const Binding& b = d->info.outputs[plan.delegate_output[j]];
    if (!check_tensor(args[n_in + j], b, "output", j)) return Error::InvalidArgument;
    st.delegate_out_addr[j] = args[n_in + j]->toTensor().mutable_data_ptr();
    st.delegate_out_nbytes[j] = args[n_in + j]->toTensor().nbytes();
  }
  if (Error e = check_unknown_aliases(d->info, plan, args); e != Error::Ok) return e;
  for (size_t o = 0; o < plan.outputs.size(); ++o) {
    const OutputSlot& s = plan.outputs[o];
    void* addr = nullptr;
    size_t nbytes = s.nbytes;  // unless the blob leaves the size to the tensor
    switch (s.target) {
      case OutputTarget::DelegateOutput:
        addr = st.delegate_out_addr[s.delegate_output];
        if (s.sized_by_tensor) nbytes = st.delegate_out_nbytes[s.delegate_output];
        break;
      case OutputTarget::AliasedInput:
        addr = st.input_addr[s.input];
        if (s.sized_by_tensor) nbytes = st.input_nbytes[s.input];
        break;
      case OutputTarget::Scratch: addr = st.scratch[s.scratch]; break;  // static (planned)
    }
    Error e = engine.bind_output(o, addr, nbytes);
    if (e != Error::Ok) {
      refuse_for_engine(
          "TensorRTBackend: %s engine refused output binding '%s' (%s, error "
          "0x%x)",
          engine.kind(), d->info.outputs[o].name.c_str(), output_target_name(s.target),
          static_cast<unsigned>(e));
      return e;
    }
  }
  if (Error e = run_and_copy(engine, d->info, plan, st); e != Error::Ok) return e;
  count_execute();
  return Error::Ok;
}

void TensorRTBackend::destroy(DelegateHandle* handle) const {
  delete static_cast<Delegate*>(handle);
}

namespace {

TensorRTBackend& backend_instance() {
  static TensorRTBackend* b = new TensorRTBackend();  // lives as long as the registry
  return *b;
}

const bool registered = [] {
  Error e = executorch::runtime::register_backend({kBackendId, &backend_instance()});
  if (e != Error::Ok) {
    refuse(
        "TensorRTBackend: register_backend failed (error 0x%x): is another "
        "TensorRTBackend already loaded in this process?",
        static_cast<unsigned>(e));
  }
  return e == Error::Ok;
}();

}  // namespace

bool backend_registered() { return registered; }

}  // namespace tte
