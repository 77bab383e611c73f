// The ExecuTorch backend "TensorRTBackend" (the id upstream uses, so .pte files interchange).
//
// Invariant: `init` parses and validates the blob, creates the engine, plans the bindings and
// allocates every buffer and counter slot `execute` will use; `execute` binds the delegate's
// tensors through the plan, runs the engine, makes exactly the plan's copies and nothing else —
// no heap allocation, no exception; `destroy` releases all of it. Every refusal is logged with
// the binding/buffer name and what is wrong. Registered at load time of the library.
#pragma once

#include <tte/blob.h>
#include <tte/plan.h>

#include <executorch/runtime/backend/interface.h>

namespace tte {

constexpr const char* kBackendId = "TensorRTBackend";

class TensorRTBackend final : public executorch::runtime::BackendInterface {
 public:
  bool is_available() const override;
  executorch::runtime::Result<executorch::runtime::DelegateHandle*> init(
      executorch::runtime::BackendInitContext& context,
      executorch::runtime::FreeableBuffer* processed,
      executorch::runtime::ArrayRef<executorch::runtime::CompileSpec> compile_specs)
      const override;
  executorch::runtime::Error execute(
      executorch::runtime::BackendExecutionContext& context,
      executorch::runtime::DelegateHandle* handle,
      executorch::runtime::Span<executorch::runtime::EValue*> args) const override;
  void destroy(executorch::runtime::DelegateHandle* handle) const override;
};

// True when this library's registration of kBackendId succeeded at load time.
bool backend_registered();

// The execute half of the aliased-pair check (CONTRACTS.md §1): for every aliased pair with an
// unknown side (TR01/TR02 binding with dtype "" and shape []), the delegate's output and input
// tensors of the pair must have the same scalar type and byte size; otherwise logs the pair
// (both binding names) and returns Error::InvalidArgument. `args` are execute's (inputs, then
// delegate outputs, per `plan`). Allocates nothing; `execute` runs it on every call before it
// binds any output or runs the engine, so the first call with mismatched tensors is refused.
executorch::runtime::Error check_unknown_aliases(
    const BlobInfo& info, const BindingPlan& plan,
    executorch::runtime::Span<executorch::runtime::EValue*> args);

}  // namespace tte
