// Page-protected memory for the tests: proves which bytes a kernel or engine writes. A region is
// mmap'ed page-aligned; pages not expected to be written are made read-only, so any write to
// them (a full copy where only rows were allowed, a reflect copy) kills the test with SIGSEGV.
//
// Invariant: the region is unmapped on destruction; `protect_all_but` leaves exactly the listed
// pages writable.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <set>

namespace tte_test {

class Pages {
 public:
  explicit Pages(size_t n_pages) : n_(n_pages), size_(page() * n_pages) {
    base_ = static_cast<uint8_t*>(
        mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  }
  ~Pages() { munmap(base_, size_); }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;

  static size_t page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
  uint8_t* data() const { return base_; }
  size_t size() const { return size_; }
  void protect_all_but(const std::set<size_t>& writable) {
    for (size_t p = 0; p < n_; ++p) {
      mprotect(base_ + p * page(), page(), writable.count(p) ? PROT_READ | PROT_WRITE : PROT_READ);
    }
  }
  void unprotect() { mprotect(base_, size_, PROT_READ | PROT_WRITE); }

 private:
  size_t n_, size_;
  uint8_t* base_;
};

}  // namespace tte_test
