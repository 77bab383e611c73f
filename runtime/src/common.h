// Shared vocabulary of the runtime: ExecuTorch's Error/Result, `format`, and `Reason`.
//
// Invariant: no function of this runtime throws across its boundary. Fallible functions return
// `Error` or `Result<T>` like ExecuTorch (ET_NODISCARD where ignoring the answer is a bug); those
// that can fail for a reason a user must read also fill a `Reason`: the stable check id of what
// was refused (docs/CONTRACTS.md §1 "Check ids": python's BlobError.check carries the same id for
// the same blob defect) and a sentence naming the binding/buffer/key and what is wrong.
#pragma once

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/result.h>
#include <executorch/runtime/platform/compiler.h>

#include <string>

namespace tte {

using executorch::runtime::Error;
using executorch::runtime::Result;

// printf into a std::string (init-time only: allocates).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Why something was refused.
struct Reason {
  const char* check = "";  // a string literal ("json.duplicate_key"): valid for ever
  std::string text;        // the sentence for a person

  // Records the refusal and returns `code` (`return why.fail(Error::InvalidProgram, ...)`).
  Error fail(Error code, const char* check_id, std::string sentence);
  // Records the refusal and returns false (for predicates).
  bool reject(const char* check_id, std::string sentence);
};

}  // namespace tte
