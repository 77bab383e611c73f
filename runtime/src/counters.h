// Process-wide counters behind the C API (CONTRACTS.md §4): bytes the runtime copied per buffer,
// and the number of delegate `execute` calls.
//
// Invariant: a counter slot is created at init (`copy_counter`, which allocates) and never freed
// or moved, so `execute` only does relaxed atomic adds on a pointer it already holds. Slots are
// keyed by buffer FQN (or input binding name when a blob names no buffer) and shared by every
// delegate of the process. Nothing here throws; only `copy_counter` allocates or locks (it
// serialises creators); the readers and `reset_counters` walk an append-only list lock-free,
// comparing keys with strcmp, so the C API behind them never allocates, blocks or fails.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace tte {

// Where a copy's bytes went: within device memory, across the host-device link (PCIe), or within
// host memory (CPU builds; state a host kernel touches).
enum class CopyPath : uint8_t { Device = 0, Link = 1, Host = 2 };

struct CopyCounter {
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> by_path[3] = {};  // indexed by CopyPath
};

// Init time; nullptr when the slot cannot be allocated.
CopyCounter* copy_counter(const std::string& key) noexcept;
inline void count_copy(CopyCounter* c, uint64_t n, CopyPath path) noexcept {  // execute time
  c->bytes.fetch_add(n, std::memory_order_relaxed);
  c->by_path[static_cast<int>(path)].fetch_add(n, std::memory_order_relaxed);
}
void count_execute() noexcept;
uint64_t copied_bytes(const char* key) noexcept;  // 0 for an unknown key or nullptr
uint64_t copied_bytes(const char* key, CopyPath path) noexcept;
uint64_t execute_count() noexcept;
void reset_counters() noexcept;

}  // namespace tte
