// Shared vocabulary of the runtime: ExecuTorch's Error/Result, and the convention for messages.
//
// Invariant: no function of this runtime throws across its boundary. Fallible functions return
// `Error` or `Result<T>` like ExecuTorch; those that can fail for a reason a user must read also
// fill a `std::string& why` with a sentence naming the binding/buffer/field and what is wrong.
#pragma once

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/result.h>

#include <string>

namespace tte {

using executorch::runtime::Error;
using executorch::runtime::Result;

// printf into a std::string (init-time only: allocates).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace tte
