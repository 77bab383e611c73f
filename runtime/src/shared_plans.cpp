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

struct Cache {
  std::mutex mutex;
  std::map<Key, std::weak_ptr<void>> plans;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: engines may outlive static destruction
  return *c;
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
  Cache& c = cache();
  // Held across the deserialize: a second method of the program waits for the first's engine
  // instead of deserializing the same plan beside it.
  std::lock_guard<std::mutex> lock(c.mutex);
  const Key key{info.named_data, info.engine_data.key, info.device_id};
  if (auto it = c.plans.find(key); it != c.plans.end()) {
    if (PlanHandle held = it->second.lock()) return held;
    c.plans.erase(it);
  }
  auto bytes = checked_bytes(info, why);
  if (!bytes.ok()) return bytes.error();
  auto plan = deserialize(bytes->data(), bytes->size(), why);
  bytes->Free();  // the SDK holds its own copy of the engine
  if (!plan.ok()) return plan.error();
  for (auto it = c.plans.begin(); it != c.plans.end();) {  // forget plans no engine holds
    it = it->second.expired() ? c.plans.erase(it) : std::next(it);
  }
  c.plans[key] = plan.get();
  return plan;
}

}  // namespace tte
