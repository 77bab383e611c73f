// The ExecuTorch backend "TensorRTBackend" (the id upstream uses, so .pte files interchange).
//
// Invariant: `init` parses and validates the blob, creates the engine, plans the bindings and
// allocates every buffer and counter slot `execute` will use; `execute` binds the delegate's
// tensors through the plan, runs the engine, makes exactly the plan's copies and nothing else —
// no heap allocation, no exception; `destroy` releases all of it. Every refusal is logged with
// the binding/buffer name and what is wrong. Registered at load time of the library.
#pragma once

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

}  // namespace tte
