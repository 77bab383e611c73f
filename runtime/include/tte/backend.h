// The ExecuTorch backend "TensorRTBackend" (the id upstream uses, so .pte files interchange).
//
// Invariant: `init` parses and validates the blob, creates the engine, fills bindings the blob
// leaves unknown in from the engine (validating again), plans the bindings and allocates every
// buffer and counter slot `execute` will use; `execute` binds the delegate's tensors through the
// plan, runs the engine, makes exactly the plan's copies and nothing else — no heap allocation,
// no exception, no name lookup — and once the engine ran it returns, on error too, only after
// the engine finished; `destroy` releases all of it. Every refusal is logged with
// the binding/buffer name and what is wrong (an init refusal also names the delegate: its
// method, blob size and bindings) and kept as the thread's last refusal (tte/refusal.h); no
// exception leaves `init` (an allocation failure is refused). Registered at load time.
#pragma once

#include <tte/blob.h>
#include <tte/counters.h>
#include <tte/engine.h>
#include <tte/plan.h>

#include <executorch/runtime/backend/interface.h>

#include <vector>

namespace tte {

constexpr const char* kBackendId = "TensorRTBackend";

class TensorRTBackend final : public executorch::runtime::BackendInterface {
 public:
  bool is_available() const override;
  executorch::runtime::Result<executorch::runtime::DelegateHandle*> init(
      executorch::runtime::BackendInitContext& context,
      executorch::runtime::FreeableBuffer* processed,
      executorch::runtime::ArrayRef<executorch::runtime::CompileSpec> compile_specs) const override;
  executorch::runtime::Error execute(
      executorch::runtime::BackendExecutionContext& context,
      executorch::runtime::DelegateHandle* handle,
      executorch::runtime::Span<executorch::runtime::EValue*> args) const override;
  void destroy(executorch::runtime::DelegateHandle* handle) const override;

 private:
  executorch::runtime::Result<executorch::runtime::DelegateHandle*> init_delegate(
      executorch::runtime::BackendInitContext& context,
      executorch::runtime::FreeableBuffer& processed) const;
};

// True when this library's registration of kBackendId succeeded at load time.
bool backend_registered();

// Init time, after the engine was created: every binding the blob leaves unknown (TR01/TR02
// dtype "" and shape []) takes the dtype and shape the engine reports (Engine::binding_type), and
// the blob is validated again with them, so an aliased pair the engine runs with different types
// is refused here, naming both bindings (Error::InvalidProgram). A binding the engine cannot
// describe stays unknown (sized and compared on its delegate tensors at execute).
executorch::runtime::Error resolve_unknown_bindings(BlobInfo& info, const Engine& engine,
                                                    std::string& why);

// The execute half of the aliased-pair check (CONTRACTS.md §1): for every pair in
// `plan.alias_checks` (a side the blob does not size: unknown — a TR01/TR02 binding with dtype ""
// and shape [] — or dynamic, with the output also a delegate output), the delegate's output and
// input tensors of the pair must have the same scalar type and byte size; otherwise logs the
// pair (both binding names) and returns Error::InvalidArgument. `args` are execute's (inputs,
// then delegate outputs, per `plan`). Allocates nothing and looks nothing up by name: the
// argument positions were planned at init. `execute` runs it on every call before it binds any
// output or runs the engine, so the first call with mismatched tensors is refused.
executorch::runtime::Error check_unknown_aliases(
    const BlobInfo& info, const BindingPlan& plan,
    executorch::runtime::Span<executorch::runtime::EValue*> args);

// What one delegate's execute reads and writes besides the plan: buffers made at init and the
// addresses/sizes of the current call's tensors.
struct CallState {
  std::vector<void*> scratch;               // per plan.scratch_nbytes (init)
  std::vector<CopyCounter*> counters;       // per plan.copies (init)
  std::vector<void*> input_addr;            // per input binding, refreshed each call
  std::vector<size_t> input_nbytes;         // per input binding, refreshed each call
  std::vector<void*> delegate_out_addr;     // per delegate output, refreshed each call
  std::vector<size_t> delegate_out_nbytes;  // per delegate output, refreshed each call
};

// The second half of execute, once every binding is bound: `engine.run()`, the plan's copies
// (each counted), then `engine.finish()`. Once run was called, finish is called on every path —
// a failed run or copy included — before this returns, so no engine work still writes caller
// memory after execute returned an error; the first error is returned, logged with the binding
// it concerns. Allocates nothing.
executorch::runtime::Error run_and_copy(Engine& engine, const BlobInfo& info,
                                        const BindingPlan& plan, const CallState& state);

}  // namespace tte
