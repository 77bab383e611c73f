#include "shared_arenas.h"

#include "blob_json.h"

#include <nlohmann/json.hpp>

#include <cstring>

namespace tte {

namespace {

using executorch::runtime::DeviceMemoryBuffer;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::Span;
using executorch::runtime::etensor::Device;
using executorch::runtime::etensor::DeviceType;

bool parse_device(const std::string& text, Device& out) {
  if (text == "cpu") {
    out = Device(DeviceType::CPU, 0);
    return true;
  }
  if (text.rfind("cuda:", 0) != 0 || text.size() == 5 || text.size() > 8) return false;
  int index = 0;
  for (size_t i = 5; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    index = index * 10 + (text[i] - '0');
  }
  out = Device(DeviceType::CUDA, static_cast<executorch::runtime::etensor::DeviceIndex>(index));
  return true;
}

bool is_size(const Json& v) { return v.is_number_unsigned(); }

}  // namespace

static Error bad_record(Reason& why, const std::string& sentence) {
  return why.fail(Error::InvalidProgram, "shared_state.record",
                  std::string(kSharedStateKey) + ": " + sentence);
}

Error SharedArenas::open(const executorch::runtime::Program& program,
                         std::unique_ptr<SharedArenas>& out, Reason& why) {
  out.reset();
  auto data_map = program.get_named_data_map();
  if (!data_map.ok() || data_map.get() == nullptr) return Error::Ok;
  auto data = data_map.get()->get_data(kSharedStateKey);
  if (!data.ok()) return Error::Ok;  // no record: nothing shared across device arenas
  FreeableBuffer text = std::move(data.get());
  Json record;
  if (!read_json(static_cast<const char*>(text.data()), text.size(), record, why)) {
    return Error::InvalidProgram;
  }
  if (!record.is_object() || record.value("version", Json()) != Json(1)) {
    return bad_record(why, "not a version-1 record of shared state arenas");
  }
  const Json& arenas = record.value("arenas", Json());
  const Json& methods = record.value("methods", Json());
  if (!arenas.is_array() || !methods.is_object()) {
    return bad_record(why, "needs 'arenas' and 'methods'");
  }
  auto shared = std::make_unique<SharedArenas>();
  if (Error e = shared->read_arenas(arenas, why); e != Error::Ok) return e;
  if (Error e = shared->index_methods(program, methods, why); e != Error::Ok) return e;
  if (Error e = shared->allocate(why); e != Error::Ok) return e;
  out = std::move(shared);
  return Error::Ok;
}

Error SharedArenas::read_arenas(const Json& arenas, Reason& why) {
  for (const Json& a : arenas) {
    Arena arena;
    if (!a.is_object() || !a.value("device", Json()).is_string() ||
        !parse_device(a["device"].get<std::string>(), arena.where) ||
        !is_size(a.value("bytes", Json())) || !a.value("buffers", Json()).is_object()) {
      return bad_record(why, "an arena needs a device ('cpu' or 'cuda:N'), 'bytes' and 'buffers'");
    }
    arena.device = a["device"].get<std::string>();
    arena.bytes = a["bytes"].get<size_t>();
    for (const auto& [fqn, offset] : a["buffers"].items()) {
      if (!is_size(offset) || offset.get<size_t>() >= arena.bytes) {
        return bad_record(why, "buffer '" + fqn + "' has no offset inside its arena of " +
                                   std::to_string(arena.bytes) + " bytes");
      }
      arena.buffers.emplace_back(fqn, offset.get<size_t>());
    }
    arenas_.push_back(std::move(arena));
  }
  return Error::Ok;
}

Error SharedArenas::index_methods(const executorch::runtime::Program& program, const Json& methods,
                                  Reason& why) {
  for (size_t m = 0; m < program.num_methods(); ++m) {
    const std::string name = program.get_method_name(m).get();
    const Json& indices = methods.value(name, Json());
    if (!indices.is_array() || indices.size() != arenas_.size()) {
      return why.fail(Error::InvalidProgram, "shared_state.method",
                      format("%s: method '%s' has no index for each of the %zu arenas",
                             kSharedStateKey, name.c_str(), arenas_.size()));
    }
    auto meta = program.method_meta(name.c_str());
    if (!meta.ok()) return meta.error();
    std::vector<size_t>& mine = index_[name];
    for (size_t a = 0; a < indices.size(); ++a) {
      const Arena& arena = arenas_[a];
      const size_t b = is_size(indices[a]) ? indices[a].get<size_t>() : SIZE_MAX;
      auto size = meta->memory_planned_buffer_size(b);
      auto device = meta->memory_planned_buffer_device(b);
      if (b >= meta->num_memory_planned_buffers() || !size.ok() || !device.ok() ||
          static_cast<size_t>(size.get()) != arena.bytes || device.get() != arena.where) {
        return why.fail(Error::InvalidProgram, "shared_state.arena",
                        format("%s: method '%s' has no planned buffer %s of %zu bytes on %s for "
                               "arena %zu",
                               kSharedStateKey, name.c_str(),
                               is_size(indices[a]) ? std::to_string(b).c_str() : "(none)",
                               arena.bytes, arena.device.c_str(), a));
      }
      mine.push_back(b);
    }
  }
  return Error::Ok;
}

Error SharedArenas::allocate(Reason& why) {
  for (Arena& arena : arenas_) {
    if (arena.where.is_cpu()) {
      arena.host.assign(arena.bytes, 0);
      continue;
    }
    auto memory = DeviceMemoryBuffer::create(arena.bytes, arena.where.type(), arena.where.index());
    if (!memory.ok()) {
      return why.fail(memory.error(), "shared_state.allocate",
                      format("%s: cannot allocate the %zu-byte state arena on %s that every "
                             "method shares (no device allocator in force?)",
                             kSharedStateKey, arena.bytes, arena.device.c_str()));
    }
    arena.device_memory = std::move(memory.get());
  }
  return Error::Ok;
}

Result<HierarchicalAllocator*> SharedArenas::memory_for(const executorch::runtime::Program& program,
                                                        const std::string& method, Reason& why) {
  auto meta = program.method_meta(method.c_str());
  if (!meta.ok()) return meta.error();
  const std::vector<size_t>& shared = index_.at(method);
  MethodMemory& mm = memory_[method];
  const size_t n = meta->num_memory_planned_buffers();
  mm.host.resize(n);
  mm.device.reserve(n);
  for (size_t b = 0; b < n; ++b) {
    const size_t bytes = meta->memory_planned_buffer_size(b).get();
    const Device device = meta->memory_planned_buffer_device(b).get();
    mm.devices.push_back(device);
    size_t a = 0;
    while (a < shared.size() && shared[a] != b) ++a;
    if (a < shared.size()) {
      mm.spans.emplace_back(arenas_[a].base(), bytes);
    } else if (device.is_cpu()) {
      mm.host[b].resize(bytes);
      mm.spans.emplace_back(mm.host[b].data(), bytes);
    } else {
      auto memory = DeviceMemoryBuffer::create(bytes, device.type(), device.index());
      if (!memory.ok()) {
        return why.fail(memory.error(), "shared_state.allocate",
                        format("%s: method '%s': cannot allocate its %zu-byte arena %zu on the "
                               "device",
                               kSharedStateKey, method.c_str(), bytes, b));
      }
      mm.device.push_back(std::move(memory.get()));
      mm.spans.push_back(mm.device.back().as_span());
    }
  }
  mm.allocator = std::make_unique<HierarchicalAllocator>(
      Span<Span<uint8_t>>(mm.spans.data(), mm.spans.size()),
      Span<const Device>(mm.devices.data(), mm.devices.size()));
  return mm.allocator.get();
}

Error SharedArenas::check(executorch::runtime::Method& loaded, const std::string& method,
                          Reason& why) const {
  for (const Arena& arena : arenas_) {
    for (const auto& [fqn, offset] : arena.buffers) {
      auto t = loaded.get_attribute(fqn.c_str());
      if (!t.ok()) continue;  // a buffer this method does not take
      const void* at = t->const_data_ptr();
      if (at != arena.base() + offset) {
        return why.fail(
            Error::InvalidProgram, "shared_state.placement",
            format("%s: method '%s': buffer '%s' is not in the state arena every "
                   "method shares (%s, offset %zu): the methods would each see their "
                   "own copy of it",
                   kSharedStateKey, method.c_str(), fqn.c_str(), arena.device.c_str(), offset));
      }
    }
  }
  return Error::Ok;
}

}  // namespace tte
