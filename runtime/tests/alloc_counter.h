// Counts heap allocations while armed, by interposing malloc/calloc/realloc in the test binary
// (glibc's __libc_* do the work). operator new reaches malloc, so it is counted too.
//
// Invariant: include this header in exactly one translation unit of a test executable; while
// `AllocCounter` is alive, every allocation in the process increments its count. Under
// AddressSanitizer (which owns malloc) nothing is interposed and `kCountsAllocations` is false.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void __libc_free(void*);
}

namespace tte_test {
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCountsAllocations = false;
#else
constexpr bool kCountsAllocations = true;
#endif
inline std::atomic<bool> g_alloc_armed{false};
inline std::atomic<size_t> g_alloc_count{0};

struct AllocCounter {
  AllocCounter() {
    g_alloc_count = 0;
    g_alloc_armed = true;
  }
  ~AllocCounter() { g_alloc_armed = false; }
  size_t count() const { return g_alloc_count.load(); }
};
}  // namespace tte_test

#if !defined(__SANITIZE_ADDRESS__)
extern "C" void* malloc(size_t n) noexcept {
  if (tte_test::g_alloc_armed.load(std::memory_order_relaxed)) ++tte_test::g_alloc_count;
  return __libc_malloc(n);
}
extern "C" void* calloc(size_t a, size_t b) noexcept {
  if (tte_test::g_alloc_armed.load(std::memory_order_relaxed)) ++tte_test::g_alloc_count;
  return __libc_calloc(a, b);
}
extern "C" void* realloc(void* p, size_t n) noexcept {
  if (tte_test::g_alloc_armed.load(std::memory_order_relaxed)) ++tte_test::g_alloc_count;
  return __libc_realloc(p, n);
}
extern "C" void free(void* p) noexcept { __libc_free(p); }
#endif
