// The reference payload's temp allocator; see scratch_arena.h.
#include "scratch_arena.h"

#include <algorithm>
#include <limits>

namespace tte {
namespace {

bool power_of_two(size_t n) { return n != 0 && (n & (n - 1)) == 0; }

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

bool ScratchArena::reserve(size_t bytes) {
  const size_t n = round_up(std::max<size_t>(bytes, 1), kArenaAlignment);
  Block arena(static_cast<uint8_t*>(std::aligned_alloc(kArenaAlignment, n)));
  if (!arena) return false;
  arena_ = std::move(arena);
  capacity_ = n;
  used_ = 0;
  return true;
}

uint32_t ScratchArena::size() const {
  return static_cast<uint32_t>(std::min<size_t>(capacity_, std::numeric_limits<uint32_t>::max()));
}

void* ScratchArena::allocate(size_t size, size_t alignment) {
  if (!power_of_two(alignment)) return nullptr;
  asked_ += size + alignment;
  wanted_ = std::max(wanted_, asked_);
  if (arena_) {
    const auto base = reinterpret_cast<uintptr_t>(arena_.get());
    const size_t start = round_up(base + used_, alignment) - base;
    if (start <= capacity_ && size <= capacity_ - start) {
      used_ = start + size;
      return arena_.get() + start;
    }
  }
  const size_t a = std::max(alignment, alignof(std::max_align_t));
  Block block(static_cast<uint8_t*>(std::aligned_alloc(a, round_up(std::max<size_t>(size, 1), a))));
  if (!block) return nullptr;
  overflow_.push_back(std::move(block));
  return overflow_.back().get();
}

void ScratchArena::reset() {
  overflow_.clear();
  used_ = 0;
  asked_ = 0;
  // Grown where it is free to move: no kernel holds scratch between resets. A refused growth
  // keeps the arena as it was (the next large request is served from the heap again).
  if (wanted_ > capacity_) (void)reserve(wanted_);
}

}  // namespace tte
