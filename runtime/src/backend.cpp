// The ExecuTorch backend "TensorRTBackend"; see tte/backend.h.
#include <tte/backend.h>
#include <tte/blob.h>
#include <tte/counters.h>
#include <tte/engine.h>
#include <tte/plan.h>

#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/platform/log.h>

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
  std::vector<void*> scratch;            // per plan.scratch_nbytes
  std::vector<CopyCounter*> counters;    // per plan.copies
  std::vector<void*> input_addr;         // per input binding, refreshed each call
  std::vector<size_t> input_nbytes;      // per input binding, refreshed each call
  std::vector<void*> delegate_out_addr;  // per delegate output, refreshed each call
  std::vector<size_t> delegate_out_nbytes;  // per delegate output, refreshed each call
};

// A delegate tensor for `b`: right dtype and exactly the binding's bytes (any tensor for an
// unknown binding: it defines them). Logs what is wrong.
bool check_tensor(const EValue* v, const Binding& b, const char* role, size_t arg) {
  if (v == nullptr || !v->isTensor()) {
    ET_LOG(Error, "TensorRTBackend: delegate %s %zu (binding '%s') is not a tensor", role, arg,
           b.name.c_str());
    return false;
  }
  const Tensor& t = v->toTensor();
  if (b.known && t.scalar_type() != dtype_scalar_type(b.dtype)) {
    ET_LOG(Error, "TensorRTBackend: delegate %s %zu (binding '%s') has scalar type %s, the "
           "binding is %s", role, arg, b.name.c_str(),
           executorch::runtime::toString(t.scalar_type()), dtype_name(b.dtype));
    return false;
  }
  if (b.is_static() && t.nbytes() != b.nbytes()) {
    ET_LOG(Error, "TensorRTBackend: delegate %s %zu (binding '%s') holds %zu bytes, the binding "
           "%s needs %zu", role, arg, b.name.c_str(), t.nbytes(), b.describe().c_str(),
           b.nbytes());
    return false;
  }
  return true;
}

Error fail_init(Error e, const std::string& why) {
  ET_LOG(Error, "TensorRTBackend: init refused the delegate blob: %s", why.c_str());
  return e;
}

}  // namespace

Error check_unknown_aliases(const BlobInfo& info, const BindingPlan& plan, Span<EValue*> args) {
  const size_t n_in = plan.arg_input.size();
  for (const AliasedIO& a : info.aliased_io) {
    const Binding* out = info.output(a.output);
    const Binding* in = info.input(a.input);
    if (out == nullptr || in == nullptr) return Error::InvalidArgument;  // validated at init
    if (out->known && in->known) continue;  // compared by the blob's validation
    size_t arg = n_in;
    for (size_t i = 0; i < n_in; ++i) {
      if (plan.arg_input[i] == in->index) arg = i;
    }
    const OutputSlot& s = plan.outputs[out->index];
    const size_t out_arg = n_in + s.delegate_output;
    if (arg == n_in || !s.also_delegate_output || out_arg >= args.size() || arg >= args.size()) {
      ET_LOG(Error, "TensorRTBackend: aliased pair '%s' -> '%s' has an unknown side, but its "
             "output and input are not both delegate tensors to compare", a.output.c_str(),
             a.input.c_str());
      return Error::InvalidArgument;
    }
    const EValue* vo = args[out_arg];
    const EValue* vi = args[arg];
    if (vo == nullptr || !vo->isTensor() || vi == nullptr || !vi->isTensor()) {
      ET_LOG(Error, "TensorRTBackend: aliased pair '%s' -> '%s': delegate argument is not a "
             "tensor", a.output.c_str(), a.input.c_str());
      return Error::InvalidArgument;
    }
    const Tensor& to = vo->toTensor();
    const Tensor& ti = vi->toTensor();
    if (to.scalar_type() != ti.scalar_type() || to.nbytes() != ti.nbytes()) {
      ET_LOG(Error, "TensorRTBackend: aliased pair '%s' -> '%s' differs at execute: output "
             "tensor is %s (%zu bytes), input tensor is %s (%zu bytes); the blob leaves %s "
             "dtype/shape to the tensors", a.output.c_str(), a.input.c_str(),
             executorch::runtime::toString(to.scalar_type()), to.nbytes(),
             executorch::runtime::toString(ti.scalar_type()), ti.nbytes(),
             !out->known && !in->known ? "their" : out->known ? "the input's" : "the output's");
      return Error::InvalidArgument;
    }
  }
  return Error::Ok;
}

bool TensorRTBackend::is_available() const { return true; }

Result<DelegateHandle*> TensorRTBackend::init(BackendInitContext& context,
                                              FreeableBuffer* processed,
                                              ArrayRef<CompileSpec> compile_specs) const {
  if (processed == nullptr || processed->data() == nullptr) {
    return fail_init(Error::InvalidArgument, "no processed bytes");
  }
  std::string why;
  auto info = parse_blob(processed->data(), processed->size(), why);
  if (!info.ok()) return fail_init(info.error(), why);
  auto plan = plan_bindings(info.get(), why);
  if (!plan.ok()) return fail_init(plan.error(), why);
  auto engine = create_engine(info.get(), why);
  if (!engine.ok()) return fail_init(engine.error(), why);

  std::unique_ptr<Delegate> d(new (std::nothrow) Delegate());
  if (!d) return fail_init(Error::MemoryAllocationFailed, "cannot allocate the delegate state");
  d->info = std::move(info.get());
  d->plan = std::move(plan.get());
  d->engine = std::move(engine.get());
  for (size_t nbytes : d->plan.scratch_nbytes) {
    auto p = d->engine->allocate_scratch(nbytes, why);
    if (!p.ok()) return fail_init(p.error(), why);
    d->scratch.push_back(p.get());
  }
  for (const CopyStep& c : d->plan.copies) d->counters.push_back(copy_counter(c.counter_key));
  d->input_addr.assign(d->info.inputs.size(), nullptr);
  d->input_nbytes.assign(d->info.inputs.size(), 0);
  d->delegate_out_addr.assign(d->info.delegate_outputs.size(), nullptr);
  d->delegate_out_nbytes.assign(d->info.delegate_outputs.size(), 0);
  // `processed` is deliberately not freed: the engine payload may point into it, and ExecuTorch
  // keeps it until the delegate is destroyed.
  return static_cast<DelegateHandle*>(d.release());
}

Error TensorRTBackend::execute(BackendExecutionContext& context, DelegateHandle* handle,
                               Span<EValue*> args) const {
  auto* d = static_cast<Delegate*>(handle);
  if (d == nullptr) return Error::InvalidState;
  const BindingPlan& plan = d->plan;
  const size_t n_in = plan.arg_input.size(), n_out = plan.delegate_output.size();
  if (args.size() != n_in + n_out) {
    ET_LOG(Error, "TensorRTBackend: the delegate call has %zu arguments, the blob declares %zu "
           "inputs + %zu outputs", args.size(), n_in, n_out);
    return Error::InvalidArgument;
  }
  Engine& engine = *d->engine;
  for (size_t i = 0; i < n_in; ++i) {
    const Binding& b = d->info.inputs[plan.arg_input[i]];
    if (!check_tensor(args[i], b, "input", i)) return Error::InvalidArgument;
    const Tensor& t = args[i]->toTensor();
    void* addr = t.mutable_data_ptr();
    d->input_addr[b.index] = addr;
    d->input_nbytes[b.index] = t.nbytes();
    Error e = engine.bind_input(b.index, addr, t.nbytes());
    if (e != Error::Ok) {
      ET_LOG(Error, "TensorRTBackend: %s engine refused input binding '%s' (error 0x%x)",
             engine.kind(), b.name.c_str(), static_cast<unsigned>(e));
      return e;
    }
  }
  for (size_t j = 0; j < n_out; ++j) {
    const Binding& b = d->info.outputs[plan.delegate_output[j]];
    if (!check_tensor(args[n_in + j], b, "output", j)) return Error::InvalidArgument;
    d->delegate_out_addr[j] = args[n_in + j]->toTensor().mutable_data_ptr();
    d->delegate_out_nbytes[j] = args[n_in + j]->toTensor().nbytes();
  }
  if (Error e = check_unknown_aliases(d->info, plan, args); e != Error::Ok) return e;
  for (size_t o = 0; o < plan.outputs.size(); ++o) {
    const OutputSlot& s = plan.outputs[o];
    const bool known = d->info.outputs[o].known;  // else: its size is its tensor's
    void* addr = nullptr;
    size_t nbytes = s.nbytes;
    switch (s.target) {
      case OutputTarget::DelegateOutput:
        addr = d->delegate_out_addr[s.delegate_output];
        if (!known) nbytes = d->delegate_out_nbytes[s.delegate_output];
        break;
      case OutputTarget::AliasedInput:
        addr = d->input_addr[s.input];
        if (!known) nbytes = d->input_nbytes[s.input];
        break;
      case OutputTarget::Scratch: addr = d->scratch[s.scratch]; break;
    }
    Error e = engine.bind_output(o, addr, nbytes);
    if (e != Error::Ok) {
      ET_LOG(Error, "TensorRTBackend: %s engine refused output binding '%s' (%s, error 0x%x)",
             engine.kind(), d->info.outputs[o].name.c_str(), output_target_name(s.target),
             static_cast<unsigned>(e));
      return e;
    }
  }
  Error e = engine.run();
  if (e != Error::Ok) {
    ET_LOG(Error, "TensorRTBackend: %s engine run failed (error 0x%x)", engine.kind(),
           static_cast<unsigned>(e));
    return e;
  }
  for (size_t k = 0; k < plan.copies.size(); ++k) {
    const CopyStep& c = plan.copies[k];
    void* dst = c.kind == CopyKind::ScratchToInput ? d->input_addr[c.input]
                                                   : d->delegate_out_addr[c.delegate_output];
    const void* src = c.kind == CopyKind::ScratchToInput ? d->scratch[c.scratch]
                                                         : d->input_addr[c.input];
    // An unknown aliased output's size is its delegate tensor's (== its input's, checked above).
    const size_t nbytes = c.kind == CopyKind::InputToDelegateOutput &&
                                  !d->info.outputs[c.output].known
                              ? d->delegate_out_nbytes[c.delegate_output]
                              : c.nbytes;
    e = engine.copy(dst, src, nbytes);
    if (e != Error::Ok) {
      ET_LOG(Error, "TensorRTBackend: copying output '%s' into '%s' failed (error 0x%x)",
             d->info.outputs[c.output].name.c_str(), c.counter_key.c_str(),
             static_cast<unsigned>(e));
      return e;
    }
    count_copy(d->counters[k], nbytes);
  }
  e = engine.finish();
  if (e != Error::Ok) {
    ET_LOG(Error, "TensorRTBackend: %s engine did not finish (error 0x%x)", engine.kind(),
           static_cast<unsigned>(e));
    return e;
  }
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
    ET_LOG(Error, "TensorRTBackend: register_backend failed (error 0x%x): is another "
           "TensorRTBackend already loaded in this process?", static_cast<unsigned>(e));
  }
  return e == Error::Ok;
}();

}  // namespace

bool backend_registered() { return registered; }

}  // namespace tte
