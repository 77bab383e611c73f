// The temp allocator of a reference payload's method: a kernel asking for scratch
// (`KernelRuntimeContext::allocate_temp`: ExecuTorch's topk, llama's custom SDPA) is served from
// an arena reserved at init; ExecuTorch resets the allocator after every kernel.
//
// Invariant: a request fails only when the heap itself is exhausted, never for want of arena. One
// that does not fit is served from the heap until the next reset, and that reset grows the arena
// to what the kernel asked for in all, so the kernel's later calls are served from the arena: the
// heap is touched only by a call that needs more scratch than every call before it.
#pragma once

#include <executorch/runtime/core/memory_allocator.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace tte {

class ScratchArena final : public executorch::runtime::MemoryAllocator {
 public:
  ScratchArena() : MemoryAllocator(0, nullptr) {}

  // The arena's first capacity, allocated once; false when the heap refuses it.
  bool reserve(size_t bytes);

  void* allocate(size_t size, size_t alignment = kDefaultAlignment) override;
  void reset() override;

  uint8_t* base_address() const override { return arena_.get(); }
  uint32_t size() const override;
  size_t used_size() const override { return used_; }
  size_t free_size() const override { return capacity_ - used_; }
  size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  using Block = std::unique_ptr<uint8_t, Free>;

  static constexpr size_t kArenaAlignment = 64;

  Block arena_;
  size_t capacity_ = 0;
  size_t used_ = 0;    // arena bytes handed out since the last reset, padding included
  size_t asked_ = 0;   // every byte asked for since the last reset, alignment slack included
  size_t wanted_ = 0;  // the most any kernel asked for: the arena's size after the next reset
  std::vector<Block> overflow_;  // requests the arena could not hold, freed at reset
};

}  // namespace tte
