// ExecuTorch's sharing of a host-only program's arenas across its methods — its
// Module(share_memory_arenas=True): planned buffers 0 and 1 (mem_id 1, activations; mem_id 2,
// the state ExecuTorch's share_mutable_buffers plans) are one allocation for every method — done
// here with memory whose addresses are known, so where each method's state landed is checked.
//
// Invariant: `memory_for` hands every method the same span for each shared planned buffer (sized
// to the largest across methods) and memory of its own for every other; `state_in_scratch` names
// a mutable buffer of a loaded method that lies in the shared activation arena (planned buffer 0),
// which every other method's calls overwrite — a program saved without its state in arenas of its
// own (an earlier release's multi-method save). Such a program must not share (program_api.cpp
// loads it again with one set of arenas per method, and says so once).
#pragma once

#include "common.h"

#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tte {

class HostArenas {
 public:
  static constexpr size_t kShared = 2;  // planned buffers 0 and 1: mem_id 1 and 2

  // The shared arenas, sized for every method of `program`.
  static Result<std::unique_ptr<HostArenas>> make(const executorch::runtime::Program& program);

  // `method`'s planned memory: the shared arenas, then buffers of its own.
  Result<executorch::runtime::HierarchicalAllocator*> memory_for(
      const executorch::runtime::Program& program, const std::string& method);

  // The FQN of a mutable buffer of `loaded` lying in the shared activation arena; "" if none.
  std::string state_in_scratch(executorch::runtime::Method& loaded,
                               const executorch::runtime::MethodMeta& meta) const;

 private:
  struct MethodMemory {
    std::vector<std::vector<uint8_t>> own;
    std::vector<executorch::runtime::Span<uint8_t>> spans;
    std::unique_ptr<executorch::runtime::HierarchicalAllocator> allocator;
  };
  std::vector<std::vector<uint8_t>> shared_;
  std::map<std::string, MethodMemory> memory_;
};

}  // namespace tte
