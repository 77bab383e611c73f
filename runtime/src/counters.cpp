// Process-wide copy/execute counters; see tte/counters.h.
#include "counters.h"

#include <cstring>
#include <mutex>
#include <new>

namespace tte {

thread_local CopyTally* t_copy_tally = nullptr;

namespace {

// A slot and its key, on a list that only grows at its head; nodes are never freed or moved.
struct Node {
  CopyCounter counter;
  std::string key;
  const Node* next = nullptr;
};

struct Registry {
  std::mutex add_mu;  // serialises copy_counter (init time) only
  std::atomic<const Node*> head{nullptr};
  std::atomic<size_t> slots{0};  // nodes on the list (the next node's slot)
  std::atomic<uint64_t> executes{0};
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: delegates may outlive static dtors
  return *r;
}

const Node* find(const Node* n, const char* key) noexcept {
  for (; n != nullptr; n = n->next) {
    if (std::strcmp(n->key.c_str(), key) == 0) return n;
  }
  return nullptr;
}

}  // namespace

CopyCounter* copy_counter(const std::string& key) noexcept {
  Registry& r = registry();
  try {
    std::lock_guard<std::mutex> lock(r.add_mu);
    const Node* head = r.head.load(std::memory_order_acquire);
    if (const Node* n = find(head, key.c_str())) return const_cast<CopyCounter*>(&n->counter);
    Node* n = new (std::nothrow) Node();
    if (n == nullptr) return nullptr;
    try {
      n->key = key;
    } catch (...) {
      delete n;
      return nullptr;
    }
    n->counter.slot = r.slots.load(std::memory_order_relaxed);
    n->next = head;
    r.head.store(n, std::memory_order_release);  // readers see the node complete
    r.slots.store(n->counter.slot + 1, std::memory_order_release);
    return &n->counter;
  } catch (...) {  // std::mutex::lock's std::system_error
    return nullptr;
  }
}

void count_execute() noexcept { registry().executes.fetch_add(1, std::memory_order_relaxed); }

uint64_t copied_bytes(const char* key) noexcept {
  if (key == nullptr) return 0;
  const Node* n = find(registry().head.load(std::memory_order_acquire), key);
  return n == nullptr ? 0 : n->counter.bytes.load(std::memory_order_relaxed);
}

uint64_t copied_bytes(const char* key, CopyPath path) noexcept {
  if (key == nullptr) return 0;
  const Node* n = find(registry().head.load(std::memory_order_acquire), key);
  return n == nullptr ? 0
                      : n->counter.by_path[static_cast<int>(path)].load(std::memory_order_relaxed);
}

bool CopyTally::size_to_counters() noexcept {
  try {
    const size_t n = registry().slots.load(std::memory_order_acquire);
    call_.assign(n, {});
    total_.assign(n, {});
    return true;
  } catch (...) {  // std::bad_alloc
    return false;
  }
}

void CopyTally::begin_call() noexcept {
  for (auto& row : call_) row = {};
}

void CopyTally::end_call() noexcept {
  for (size_t s = 0; s < call_.size(); ++s) {
    for (int p = 0; p < 3; ++p) total_[s][p] += call_[s][p];
  }
}

uint64_t CopyTally::bytes(const char* key, CopyPath path) const noexcept {
  if (key == nullptr) return 0;
  const Node* n = find(registry().head.load(std::memory_order_acquire), key);
  if (n == nullptr || n->counter.slot >= total_.size()) return 0;
  return total_[n->counter.slot][static_cast<int>(path)];
}

uint64_t execute_count() noexcept { return registry().executes.load(std::memory_order_relaxed); }

void reset_counters() noexcept {
  Registry& r = registry();
  for (const Node* n = r.head.load(std::memory_order_acquire); n != nullptr; n = n->next) {
    auto& c = const_cast<Node*>(n)->counter;
    c.bytes.store(0, std::memory_order_relaxed);
    for (auto& b : c.by_path) b.store(0, std::memory_order_relaxed);
  }
  r.executes.store(0, std::memory_order_relaxed);
}

}  // namespace tte
