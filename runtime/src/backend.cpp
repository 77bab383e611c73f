// The ExecuTorch backend "TensorRTBackend": a thin BackendInterface over one DelegateExecutor per
// delegate, built inside the delegate's runtime allocation (ExecuTorch's XNNPACK backend keeps
// its XNNExecutor the same way).
//
// Invariant: `init` builds the executor (parse, validate, engine, plan, every allocation a call
// needs) or refuses, logging the reason and naming the delegate (its method, blob size and, once
// read, bindings), with the reason's check id kept beside it (refusal.h); no exception leaves it
// (an allocation failure is refused). `execute` is `prepare_args` then `forward` on the executor,
// counted when both passed: no heap allocation, no exception, no name lookup. `destroy` runs the
// executor's destructor (its memory is the runtime allocator's).
#include <tte/backend.h>

#include "counters.h"
#include "executor.h"
#include "refusal.h"

#include <executorch/runtime/backend/interface.h>

#include <new>
#include <string>

namespace tte {
namespace {

using executorch::runtime::ArrayRef;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::CompileSpec;
using executorch::runtime::DelegateHandle;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Span;

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

Error refuse_init(Error e, const Reason& why, const std::string& label) {
  refuse(why.check, "TensorRTBackend: init refused the delegate blob: %s (%s)", why.text.c_str(),
         label.c_str());
  return e;
}

// The delegate's executor, in its runtime allocation; a refusal names the delegate. May throw
// std::bad_alloc (the caller catches it), leaving nothing behind.
// The partitioner's `target_device` compile spec ("cuda:0"), or "" (a host delegate).
std::string target_device(ArrayRef<CompileSpec> specs) {
  for (const CompileSpec& spec : specs) {
    if (spec.key != nullptr && std::string(spec.key) == "target_device" &&
        spec.value.buffer != nullptr) {
      return std::string(static_cast<const char*>(spec.value.buffer), spec.value.nbytes);
    }
  }
  return "";
}

Result<DelegateHandle*> create_executor(BackendInitContext& context, FreeableBuffer* processed,
                                        ArrayRef<CompileSpec> specs) {
  Reason why;
  if (processed == nullptr || processed->data() == nullptr) {
    why.reject("init.no_processed", "no processed bytes");
    return refuse_init(Error::InvalidArgument, why, delegate_label(context, 0, nullptr));
  }
  const size_t size = processed->size();
  auto* allocator = context.get_runtime_allocator();
  auto* executor = allocator ? allocator->allocateInstance<DelegateExecutor>() : nullptr;
  if (executor == nullptr) {
    why.reject("runtime.out_of_memory", "the runtime allocator has no room for its executor");
    return refuse_init(Error::MemoryAllocationFailed, why, delegate_label(context, size, nullptr));
  }
  new (executor) DelegateExecutor();
  Error e;
  try {
    e = executor->init(processed->data(), size, why, target_device(specs),
                       context.get_named_data_map());
    if (e != Error::Ok) {
      refuse_init(
          e, why,
          delegate_label(context, size, executor->has_info() ? &executor->info() : nullptr));
    }
  } catch (...) {
    executor->~DelegateExecutor();
    throw;
  }
  if (e != Error::Ok) {
    executor->~DelegateExecutor();
    return e;
  }
  // `processed` is deliberately not freed: the engine payload may point into it, and ExecuTorch
  // keeps it until the delegate is destroyed.
  return static_cast<DelegateHandle*>(executor);
}

class TensorRTBackend final : public executorch::runtime::BackendInterface {
 public:
  bool is_available() const override { return true; }

  executorch::runtime::Result<DelegateHandle*> init(
      BackendInitContext& context, FreeableBuffer* processed,
      ArrayRef<CompileSpec> compile_specs) const override {
    (void)last_refusal();  // the thread's refusal buffer exists before any execute writes it
    try {  // init allocates (strings, vectors, the engine): no exception may reach ExecuTorch
      return create_executor(context, processed, compile_specs);
    } catch (...) {
      refuse("runtime.out_of_memory",
             "TensorRTBackend: init refused the delegate blob: out of memory");
      return Error::MemoryAllocationFailed;
    }
  }

  Error execute(BackendExecutionContext& context, DelegateHandle* handle,
                Span<EValue*> args) const override {
    auto* executor = static_cast<DelegateExecutor*>(handle);
    if (executor == nullptr) return Error::InvalidState;
    clear_refusal();  // what this call refuses, if anything, is what last_refusal() then says
    Error e = executor->prepare_args(args);
    if (e == Error::Ok) e = executor->forward();
    if (e == Error::Ok) count_execute();
    return e;
  }

  void destroy(DelegateHandle* handle) const override {
    if (handle != nullptr) static_cast<DelegateExecutor*>(handle)->~DelegateExecutor();
  }
};

TensorRTBackend& backend_instance() {
  static TensorRTBackend* b = new TensorRTBackend();  // lives as long as the registry
  return *b;
}

const bool registered = [] {
  const Error e = executorch::runtime::register_backend({kBackendId, &backend_instance()});
  if (e != Error::Ok) {
    refuse("runtime.register",
           "TensorRTBackend: register_backend failed (error 0x%x): is another TensorRTBackend "
           "already loaded in this process?",
           static_cast<unsigned>(e));
  }
  return e == Error::Ok;
}();

}  // namespace

bool backend_registered() { return registered; }

}  // namespace tte
