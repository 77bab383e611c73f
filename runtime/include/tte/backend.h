// The ExecuTorch backend "TensorRTBackend" of this library (the id upstream uses, so .pte files
// interchange), registered into ExecuTorch's backend registry when the library is loaded.
//
// Invariant: a process that loaded libtte_runtime resolves kBackendId to this runtime's backend
// when `backend_registered()` is true (it is false only when another backend had taken the id
// first; the refusal is then logged). Everything else about the backend is reached through
// ExecuTorch (executorch::runtime::get_backend_class) or the C API (tte/c_api.h).
#pragma once

namespace tte {

constexpr const char* kBackendId = "TensorRTBackend";

// True when this library's registration of kBackendId succeeded at load time.
bool backend_registered();

}  // namespace tte
