// The state arenas a program's methods share (named data "tte.shared_state", written by
// torch_tensorrt_ext.executorch.saving.shared_arenas): each mutable buffer is one allocation,
// read and written by every method, where ExecuTorch 1.5.1's Module cannot share device arenas.
//
// Invariant: `SharedArenas::open` accepts a record only when it names every method of the
// program, and each method's arena index is one of its planned buffers with the arena's device
// and exactly its size; each arena is then allocated once (device arenas through ExecuTorch's
// registered DeviceAllocator, as ExecuTorch allocates its own) and is the same span in every
// method's planned memory; every other planned buffer is the method's own. `check` refuses a
// loaded method whose buffer is not where the record puts it. A refusal names the check
// ("shared_state.*"), the method, and the arena or buffer.
#pragma once

#include "common.h"

#include <executorch/runtime/core/device_memory_buffer.h>
#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <nlohmann/json_fwd.hpp>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tte {

constexpr const char* kSharedStateKey = "tte.shared_state";

class SharedArenas {
 public:
  // The program's record, allocated: nullptr (and Ok) when it records none.
  static Error open(const executorch::runtime::Program& program, std::unique_ptr<SharedArenas>& out,
                    Reason& why);

  // `method`'s planned memory: the shared arenas and its own other buffers (owned here).
  Result<executorch::runtime::HierarchicalAllocator*> memory_for(
      const executorch::runtime::Program& program, const std::string& method, Reason& why);

  // Every buffer the record places lies at its arena's base + offset in `loaded`.
  Error check(executorch::runtime::Method& loaded, const std::string& method, Reason& why) const;

 private:
  struct Arena {
    std::string device;  // "cpu", "cuda:0"
    executorch::runtime::etensor::Device where{executorch::runtime::etensor::DeviceType::CPU, 0};
    size_t bytes = 0;
    std::vector<std::pair<std::string, size_t>> buffers;  // FQN, offset
    std::vector<uint8_t> host;
    executorch::runtime::DeviceMemoryBuffer device_memory;
    uint8_t* base() const {
      return where.is_cpu() ? const_cast<uint8_t*>(host.data())
                            : static_cast<uint8_t*>(device_memory.data());
    }
  };
  struct MethodMemory {
    std::vector<std::vector<uint8_t>> host;
    std::vector<executorch::runtime::DeviceMemoryBuffer> device;
    std::vector<executorch::runtime::Span<uint8_t>> spans;
    std::vector<executorch::runtime::etensor::Device> devices;
    std::unique_ptr<executorch::runtime::HierarchicalAllocator> allocator;
  };

  // The steps of `open`: the record's arenas, each method's planned buffer for each, the memory.
  Error read_arenas(const nlohmann::ordered_json& arenas, Reason& why);
  Error index_methods(const executorch::runtime::Program& program,
                      const nlohmann::ordered_json& methods, Reason& why);
  Error allocate(Reason& why);

  std::vector<Arena> arenas_;
  std::map<std::string, std::vector<size_t>> index_;  // method -> planned-buffer index per arena
  std::map<std::string, MethodMemory> memory_;
};

}  // namespace tte
