// The reference payload's temp allocator (scratch_arena.h): a kernel asking more scratch than the
// arena holds gets it (from the heap, until the reset that follows its call), and the arena grows
// at that reset so the same requests are then served from the arena; alignment is honoured either
// way, and an alignment that is not a power of two is refused.
#include "check.h"

#include "scratch_arena.h"

#include <cstdint>
#include <cstring>

namespace {

bool inside(const tte::ScratchArena& a, const void* p, size_t n) {
  const auto* b = a.base_address();
  const auto* q = static_cast<const uint8_t*>(p);
  return b != nullptr && q >= b && q + n <= b + a.capacity();
}

bool aligned(const void* p, size_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

}  // namespace

TEST(requests_the_arena_holds_come_from_it) {
  tte::ScratchArena a;
  REQUIRE(a.reserve(1024));
  void* p = a.allocate(100, 8);
  void* q = a.allocate(200, 64);
  CHECK(inside(a, p, 100));
  CHECK(inside(a, q, 200));
  CHECK(aligned(q, 64));
  CHECK(static_cast<uint8_t*>(q) >= static_cast<uint8_t*>(p) + 100);
  a.reset();
  CHECK_EQ(a.used_size(), size_t(0));
  CHECK_EQ(a.allocate(100, 8), p);  // reset hands the same bytes out again
}

TEST(a_request_beyond_the_arena_is_served_and_the_arena_grows_to_it) {
  tte::ScratchArena a;
  REQUIRE(a.reserve(1024));
  void* small = a.allocate(512, 16);
  void* big = a.allocate(4096, 256);  // does not fit: from the heap, not refused
  REQUIRE(big != nullptr);
  CHECK(inside(a, small, 512));
  CHECK(!inside(a, big, 4096));
  CHECK(aligned(big, 256));
  std::memset(big, 0x5a, 4096);  // writable, all of it
  a.reset();
  CHECK(a.capacity() >= size_t(512 + 4096));
  // the same kernel's next call: both requests from the (grown) arena
  small = a.allocate(512, 16);
  big = a.allocate(4096, 256);
  CHECK(inside(a, small, 512));
  CHECK(inside(a, big, 4096));
  CHECK(aligned(big, 256));
}

TEST(an_arena_never_reserved_serves_from_the_heap_and_grows) {
  tte::ScratchArena a;
  void* p = a.allocate(300, 8);
  REQUIRE(p != nullptr);
  CHECK(!inside(a, p, 300));
  a.reset();
  CHECK(inside(a, a.allocate(300, 8), 300));
}

TEST(an_alignment_not_a_power_of_two_is_refused) {
  tte::ScratchArena a;
  REQUIRE(a.reserve(1024));
  CHECK(a.allocate(8, 3) == nullptr);
  CHECK(a.allocate(8, 0) == nullptr);
}

TEST_MAIN()
