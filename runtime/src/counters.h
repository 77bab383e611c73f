// Process-wide counters behind the C API (CONTRACTS.md §4): bytes the runtime copied per buffer,
// and the number of delegate `execute` calls; and a program's own share of those bytes.
//
// Invariant: a counter slot is created at init (`copy_counter`, which allocates) and never freed
// or moved, so `execute` only does relaxed atomic adds on a pointer it already holds. Slots are
// keyed by buffer FQN (or input binding name when a blob names no buffer) and shared by every
// delegate of the process. Nothing here throws; only `copy_counter` allocates or locks (it
// serialises creators); the readers and `reset_counters` walk an append-only list lock-free,
// comparing keys with strcmp, so the C API behind them never allocates, blocks or fails.
//
// A `CopyTally` is one program's (one method's) share: while a `TallyScope` makes it the calling
// thread's, `count_copy` also adds there, by the counter's slot (its creation index). It is sized
// after its program's delegates created their counters (init), so a later counter's slot, never
// one of its own, falls outside it. Only the thread running the program writes it (a program is
// not run by two threads at once), so threads running programs of their own each count their own
// copies, with no atomic or lock shared between them beyond the process-wide counters.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace tte {

// Where a copy's bytes went: within device memory, across the host-device link (PCIe), or within
// host memory (CPU builds; state a host kernel touches).
enum class CopyPath : uint8_t { Device = 0, Link = 1, Host = 2 };

struct CopyCounter {
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> by_path[3] = {};  // indexed by CopyPath
  size_t slot = 0;                        // creation index: its row in a CopyTally
};

class CopyTally {
 public:
  // Init time (allocates): one row per counter the process has now; false when out of memory.
  bool size_to_counters() noexcept;
  void begin_call() noexcept;  // the next call's bytes start from zero
  void end_call() noexcept;    // a call that succeeded: its bytes join the total
  void add(size_t slot, CopyPath path, uint64_t n) noexcept {
    if (slot < call_.size()) call_[slot][static_cast<int>(path)] += n;
  }
  // Bytes of the successful calls for the counter `key`; 0 for an unknown key or nullptr.
  uint64_t bytes(const char* key, CopyPath path) const noexcept;

 private:
  std::vector<std::array<uint64_t, 3>> call_, total_;
};

// The tally `count_copy` adds to on this thread besides the process-wide counters (or none).
extern thread_local CopyTally* t_copy_tally;

class TallyScope {  // makes `tally` the thread's for one call, counting from zero
 public:
  explicit TallyScope(CopyTally& tally) noexcept : previous_(t_copy_tally) {
    tally.begin_call();
    t_copy_tally = &tally;
  }
  ~TallyScope() { t_copy_tally = previous_; }
  TallyScope(const TallyScope&) = delete;
  TallyScope& operator=(const TallyScope&) = delete;

 private:
  CopyTally* previous_;
};

// Init time; nullptr when the slot cannot be allocated.
CopyCounter* copy_counter(const std::string& key) noexcept;
inline void count_copy(CopyCounter* c, uint64_t n, CopyPath path) noexcept {  // execute time
  c->bytes.fetch_add(n, std::memory_order_relaxed);
  c->by_path[static_cast<int>(path)].fetch_add(n, std::memory_order_relaxed);
  if (CopyTally* t = t_copy_tally) t->add(c->slot, path, n);
}
void count_execute() noexcept;
uint64_t copied_bytes(const char* key) noexcept;  // 0 for an unknown key or nullptr
uint64_t copied_bytes(const char* key, CopyPath path) noexcept;
uint64_t execute_count() noexcept;
void reset_counters() noexcept;

}  // namespace tte
