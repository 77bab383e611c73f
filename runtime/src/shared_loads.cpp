#include "shared_loads.h"

namespace tte {

using executorch::runtime::FreeableBuffer;

Result<FreeableBuffer> SharedLoads::load(const DataLoader& inner, size_t offset, size_t size,
                                         const DataLoader::SegmentInfo& info) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto range = std::make_pair(offset, size);
  auto it = entries_.find(range);
  if (it == entries_.end()) {
    auto loaded = inner.load(offset, size, info);
    if (!loaded.ok()) return loaded.error();
    auto entry = std::make_unique<Entry>(std::move(loaded.get()));
    entry->owner = this;
    entry->range = range;
    it = entries_.emplace(range, std::move(entry)).first;
  }
  Entry* e = it->second.get();
  ++e->refs;
  return FreeableBuffer(e->buffer.data(), e->buffer.size(), &SharedLoads::release, e);
}

void SharedLoads::release(void* entry, void*, size_t) {
  auto* e = static_cast<Entry*>(entry);
  SharedLoads* owner = e->owner;
  std::lock_guard<std::mutex> lock(owner->mutex_);
  if (--e->refs > 0) return;
  e->buffer.Free();
  owner->entries_.erase(e->range);  // destroys `e`
}

}  // namespace tte
