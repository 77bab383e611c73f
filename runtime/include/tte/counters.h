// Process-wide counters behind the C API (CONTRACTS.md §4): bytes the runtime copied per buffer,
// and the number of delegate `execute` calls.
//
// Invariant: a counter slot is created at init (`copy_counter`, which allocates) and never freed
// or moved, so `execute` only does relaxed atomic adds on a pointer it already holds. Slots are
// keyed by buffer FQN (or input binding name when a blob names no buffer) and shared by every
// delegate of the process.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace tte {

struct CopyCounter {
  std::atomic<uint64_t> bytes{0};
};

CopyCounter* copy_counter(const std::string& key);       // init time
inline void count_copy(CopyCounter* c, uint64_t n) {     // execute time
  c->bytes.fetch_add(n, std::memory_order_relaxed);
}
void count_execute();
uint64_t copied_bytes(const char* key);  // 0 for an unknown key
uint64_t execute_count();
void reset_counters();

}  // namespace tte
