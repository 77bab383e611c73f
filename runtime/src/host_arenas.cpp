#include "host_arenas.h"

#include <algorithm>

namespace tte {

using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::Span;

Result<std::unique_ptr<HostArenas>> HostArenas::make(const executorch::runtime::Program& program) {
  auto arenas = std::make_unique<HostArenas>();
  std::vector<size_t> sizes(kShared, 0);
  for (size_t m = 0; m < program.num_methods(); ++m) {
    auto name = program.get_method_name(m);
    if (!name.ok()) return name.error();
    auto meta = program.method_meta(name.get());
    if (!meta.ok()) return meta.error();
    for (size_t b = 0; b < kShared && b < meta->num_memory_planned_buffers(); ++b) {
      auto size = meta->memory_planned_buffer_size(b);
      if (!size.ok()) return size.error();
      sizes[b] = std::max(sizes[b], static_cast<size_t>(size.get()));
    }
  }
  for (size_t bytes : sizes) arenas->shared_.emplace_back(bytes);
  return arenas;
}

Result<HierarchicalAllocator*> HostArenas::memory_for(const executorch::runtime::Program& program,
                                                      const std::string& method) {
  auto meta = program.method_meta(method.c_str());
  if (!meta.ok()) return meta.error();
  MethodMemory& mm = memory_[method];
  const size_t n = meta->num_memory_planned_buffers();
  mm.own.resize(n);
  mm.spans.clear();
  for (size_t b = 0; b < n; ++b) {
    auto size = meta->memory_planned_buffer_size(b);
    if (!size.ok()) return size.error();
    const size_t bytes = static_cast<size_t>(size.get());
    if (b < kShared) {
      mm.spans.emplace_back(shared_[b].data(), bytes);
    } else {
      mm.own[b].resize(bytes);
      mm.spans.emplace_back(mm.own[b].data(), bytes);
    }
  }
  mm.allocator = std::make_unique<HierarchicalAllocator>(
      Span<Span<uint8_t>>(mm.spans.data(), mm.spans.size()));
  return mm.allocator.get();
}

std::string HostArenas::state_in_scratch(executorch::runtime::Method& loaded,
                                         const executorch::runtime::MethodMeta& meta) const {
  const uint8_t* begin = shared_.empty() ? nullptr : shared_[0].data();
  const uint8_t* end = begin + (shared_.empty() ? 0 : shared_[0].size());
  for (size_t a = 0; a < meta.num_attributes(); ++a) {
    auto info = meta.attribute_tensor_meta(a);
    if (!info.ok()) continue;
    const std::string fqn(info->name());
    auto t = loaded.get_attribute(fqn.c_str());
    if (!t.ok()) continue;
    const auto* at = static_cast<const uint8_t*>(t->const_data_ptr());
    if (at != nullptr && at >= begin && at < end) return fqn;
  }
  return "";
}

}  // namespace tte
