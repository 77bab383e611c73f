// The last refusal of the runtime on this thread, for callers that cannot see ExecuTorch's log
// (python's ExecuTorch bindings turn a refused delegate into "Failed to load method ..., error
// 0x23"; tte_runtime_last_refusal / tte_runtime_last_check let them say why, CONTRACTS.md §4).
//
// Invariant: `refuse` formats into a fixed thread-local buffer (cut at kRefusalBytes - 1 bytes),
// keeps the check id beside it (a string literal: only the pointer is stored) and logs the text
// through ET_LOG(Error); `record_refusal` does the same without logging. None of these
// allocates, locks, fails or throws, so execute may use them. Both stay until the next refusal or
// `clear_refusal` on the same thread.
#pragma once

#include <cstddef>

namespace tte {

constexpr size_t kRefusalBytes = 2048;

void refuse(const char* check, const char* fmt, ...) noexcept __attribute__((format(printf, 2, 3)));
void record_refusal(const char* check, const char* text) noexcept;
const char* last_refusal() noexcept;  // "" when none since the last clear
const char* last_check() noexcept;    // "" when none since the last clear
void clear_refusal() noexcept;

}  // namespace tte
