// The last refusal of the runtime on this thread, for callers that cannot see ExecuTorch's log
// (python's ExecuTorch bindings turn a refused delegate into "Failed to load method ..., error
// 0x23"; tte_runtime_last_refusal lets them say why, CONTRACTS.md §4).
//
// Invariant: `refuse` formats into a fixed thread-local buffer (cut at kRefusalBytes - 1 bytes)
// and logs the same text through ET_LOG(Error); neither it nor `last_refusal` /
// `clear_refusal` allocates, locks, fails or throws, so execute may use it. The text stays until
// the next `refuse` or `clear_refusal` on the same thread.
#pragma once

#include <cstddef>

namespace tte {

constexpr size_t kRefusalBytes = 2048;

void refuse(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));
const char* last_refusal() noexcept;  // "" when none since the last clear
void clear_refusal() noexcept;

}  // namespace tte
