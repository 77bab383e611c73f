#include "shared_plans.h"

#include "sha256.h"

#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace tte {
namespace {

using Key = std::tuple<const void*, std::string, int64_t>;  // named data map, key, device

// One key's engine, and the lock its first asker holds while it deserializes: a second method of
// the program waits for that engine instead of deserializing the same plan beside it, and a plan
// under another key deserializes meanwhile.
struct Slot {
  std::mutex mutex;
  std::weak_ptr<void> plan;
};

struct Cache {
  std::mutex mutex;  // guards `slots` only, never held across a deserialize
  std::map<Key, std::shared_ptr<Slot>> slots;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: engines may outlive static destruction
  return *c;
}

// The slot of `key`, made if absent; slots no engine holds and no asker waits on are forgotten.
std::shared_ptr<Slot> slot_of(const Key& key) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto it = c.slots.begin(); it != c.slots.end();) {
    const bool idle = it->second.use_count() == 1 && it->second->plan.expired();
    it = idle && it->first != key ? c.slots.erase(it) : std::next(it);
  }
  std::shared_ptr<Slot>& slot = c.slots[key];
  if (!slot) slot = std::make_shared<Slot>();
  return slot;
}

// The plan's bytes under the blob's key, checked against its size and the digest the key names.
Result<executorch::runtime::FreeableBuffer> checked_bytes(const BlobInfo& info, Reason& why) {
  const EngineDataRef& ref = info.engine_data;
  auto data = named_bytes(info, ref.key);
  if (!data.ok()) {
    return why.fail(Error::NotFound, "engine_data.missing",
                    "named data key '" + ref.key +
                        "' (the engine's plan) is neither in the .pte nor in a data file loaded "
                        "with it: the .ptd is missing or from another program; load the .ptd "
                        "saved with this .pte");
  }
  if (data->size() != ref.nbytes) {
    return why.fail(
        Error::InvalidExternalData, "engine_data.size",
        format("named data key '%s' holds %zu bytes; the engine's plan is %llu: the "
               "data file is truncated or from another program",
               ref.key.c_str(), data->size(), static_cast<unsigned long long>(ref.nbytes)));
  }
  Digest want{};
  if (!named_key_digest(ref.key, want) || sha256(data->data(), data->size()) != want) {
    return why.fail(Error::InvalidExternalData, "engine_data.digest",
                    format("named data '%s' (%zu bytes, the engine's plan) does not hash to the "
                           "SHA-256 its key names: the data file was altered or damaged; "
                           "re-export the .pte and its .ptd",
                           ref.key.c_str(), data->size()));
  }
  return std::move(data.get());
}

}  // namespace

Result<PlanHandle> shared_plan(const BlobInfo& info, const Deserialize& deserialize, Reason& why) {
  if (info.engine_data.key.empty()) return deserialize(info.engine, info.engine_size, why);
  const std::shared_ptr<Slot> slot =
      slot_of({info.named_data, info.engine_data.key, info.device_id});
  std::lock_guard<std::mutex> lock(slot->mutex);
  if (PlanHandle held = slot->plan.lock()) return held;
  auto bytes = checked_bytes(info, why);
  if (!bytes.ok()) return bytes.error();
  auto plan = deserialize(bytes->data(), bytes->size(), why);
  bytes->Free();  // the SDK holds its own copy of the engine
  if (!plan.ok()) return plan.error();
  slot->plan = plan.get();
  return plan;
}

}  // namespace tte
