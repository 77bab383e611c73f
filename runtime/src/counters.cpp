// Process-wide copy/execute counters; see tte/counters.h.
#include <tte/counters.h>

#include <deque>
#include <mutex>
#include <unordered_map>

namespace tte {
namespace {

struct Registry {
  std::mutex mu;
  std::deque<CopyCounter> slots;  // deque: growing never moves existing slots
  std::unordered_map<std::string, CopyCounter*> by_key;
  std::atomic<uint64_t> executes{0};
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: delegates may outlive static dtors
  return *r;
}

}  // namespace

CopyCounter* copy_counter(const std::string& key) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_key.find(key);
  if (it != r.by_key.end()) return it->second;
  r.slots.emplace_back();
  CopyCounter* c = &r.slots.back();
  r.by_key.emplace(key, c);
  return c;
}

void count_execute() { registry().executes.fetch_add(1, std::memory_order_relaxed); }

uint64_t copied_bytes(const char* key) {
  if (!key) return 0;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_key.find(key);
  return it == r.by_key.end() ? 0 : it->second->bytes.load(std::memory_order_relaxed);
}

uint64_t execute_count() { return registry().executes.load(std::memory_order_relaxed); }

void reset_counters() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& c : r.slots) c.bytes.store(0, std::memory_order_relaxed);
  r.executes.store(0, std::memory_order_relaxed);
}

}  // namespace tte
