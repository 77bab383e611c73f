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
  std::vector<void*> delegate_out_addr;  // per delegate output, refreshed each call
};

// A delegate tensor for `b`: right dtype and exactly the binding's bytes. Logs what is wrong.
bool check_tensor(const EValue* v, const Binding& b, const char* role, size_t arg) {
  if (v == nullptr || !v->isTensor()) {
    ET_LOG(Error, "TensorRTBackend: delegate %s %zu (binding '%s') is not a tensor", role, arg,
           b.name.c_str());
    return false;
  }
  const Tensor& t = v->toTensor();
  if (t.scalar_type() != dtype_scalar_type(b.dtype)) {
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
  d->delegate_out_addr.assign(d->info.delegate_outputs.size(), nullptr);
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
  }
  for (size_t o = 0; o < plan.outputs.size(); ++o) {
    const OutputSlot& s = plan.outputs[o];
    void* addr = nullptr;
    switch (s.target) {
      case OutputTarget::DelegateOutput: addr = d->delegate_out_addr[s.delegate_output]; break;
      case OutputTarget::AliasedInput: addr = d->input_addr[s.input]; break;
      case OutputTarget::Scratch: addr = d->scratch[s.scratch]; break;
    }
    Error e = engine.bind_output(o, addr, s.nbytes);
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
    e = engine.copy(dst, src, c.nbytes);
    if (e != Error::Ok) {
      ET_LOG(Error, "TensorRTBackend: copying output '%s' into '%s' failed (error 0x%x)",
             d->info.outputs[c.output].name.c_str(), c.counter_key.c_str(),
             static_cast<unsigned>(e));
      return e;
    }
    count_copy(d->counters[k], c.nbytes);
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
