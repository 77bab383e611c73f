// The emulated device of device.h: device memory the host cannot touch, for CPU CI.
//
// Invariant: an allocation is one memfd mapped twice. The address handed out is a PROT_NONE
// mapping — any host read or write of it faults — and a second, read-write mapping of the same
// pages is the "device side", reached only through this file's copy functions. The allocation
// table is append-only and fixed-size, read without locks (also from the SIGSEGV handler, which
// only calls async-signal-safe functions).
#include "device.h"

#include <sys/mman.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

namespace tte {
namespace {

constexpr size_t kMaxAllocations = 4096;
constexpr size_t kPage = 4096;

struct Allocation {
  std::atomic<uintptr_t> host{0};  // the device pointer (no access); 0 when free
  uintptr_t view = 0;              // the read-write view of the same pages
  size_t size = 0;                 // bytes mapped (a whole number of pages)
};

Allocation g_table[kMaxAllocations];
std::atomic<size_t> g_used{0};
std::mutex g_alloc;
struct sigaction g_previous;

const Allocation* find(const void* p) noexcept {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const size_t n = g_used.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    const uintptr_t base = g_table[i].host.load(std::memory_order_acquire);
    if (base != 0 && a >= base && a < base + g_table[i].size) return &g_table[i];
  }
  return nullptr;
}

// The read-write view of [p, p + n), or nullptr when that range is not inside one allocation.
void* view_of(const void* p, size_t n) noexcept {
  const Allocation* a = find(p);
  const auto at = reinterpret_cast<uintptr_t>(p);
  if (a == nullptr) return nullptr;
  const uintptr_t base = a->host.load(std::memory_order_acquire);
  if (n > a->size - (at - base)) return nullptr;
  return reinterpret_cast<void*>(a->view + (at - base));
}

void write_all(const char* s) noexcept {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void write_hex(uintptr_t v) noexcept {
  char buf[2 + 2 * sizeof v + 1];
  buf[0] = '0';
  buf[1] = 'x';
  for (size_t i = 0; i < 2 * sizeof v; ++i) {
    buf[2 + i] = "0123456789abcdef"[(v >> (4 * (2 * sizeof v - 1 - i))) & 0xf];
  }
  buf[sizeof buf - 1] = '\0';
  write_all(buf);
}

void write_dec(size_t v) noexcept {
  char buf[24];
  size_t i = sizeof buf;
  buf[--i] = '\0';
  do {
    buf[--i] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && i > 0);
  write_all(buf + i);
}

void on_segv(int sig, siginfo_t* info, void* context) {
  const Allocation* a = info != nullptr ? find(info->si_addr) : nullptr;
  if (a != nullptr) {
    write_all("tte emulated device: host code touched device memory at ");
    write_hex(reinterpret_cast<uintptr_t>(info->si_addr));
    write_all(" (a device allocation of ");
    write_dec(a->size);
    write_all(" bytes at ");
    write_hex(a->host.load(std::memory_order_acquire));
    write_all(
        "); on a GPU this is a crash. Device memory is reached only through the "
        "device's copies (tte::Device / ExecuTorch's DeviceAllocator)\n");
  }
  // Let the fault kill the process as it would have (or the previous handler take it).
  sigaction(SIGSEGV, &g_previous, nullptr);
  (void)sig;
  (void)context;
}

void install_fault_report() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = &on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous);
  });
}

class EmulatedDevice final : public Device {
 public:
  const char* name() const override { return "emulated"; }

  Result<void*> allocate(size_t nbytes) override {
    install_fault_report();
    const size_t size = (nbytes + kPage - 1) / kPage * kPage + (nbytes == 0 ? kPage : 0);
    std::lock_guard<std::mutex> lock(g_alloc);
    size_t slot = kMaxAllocations;
    const size_t used = g_used.load(std::memory_order_relaxed);
    for (size_t i = 0; i < used && slot == kMaxAllocations; ++i) {
      if (g_table[i].host.load(std::memory_order_relaxed) == 0) slot = i;
    }
    if (slot == kMaxAllocations) {
      if (used == kMaxAllocations) return Error::MemoryAllocationFailed;
      slot = used;
    }
    const int fd = memfd_create("tte-emulated-device", MFD_CLOEXEC);
    if (fd < 0) return Error::MemoryAllocationFailed;
    void* host = MAP_FAILED;
    void* view = MAP_FAILED;
    if (ftruncate(fd, static_cast<off_t>(size)) == 0) {
      host = mmap(nullptr, size, PROT_NONE, MAP_SHARED, fd, 0);
      view = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    close(fd);
    if (host == MAP_FAILED || view == MAP_FAILED) {
      if (host != MAP_FAILED) munmap(host, size);
      if (view != MAP_FAILED) munmap(view, size);
      return Error::MemoryAllocationFailed;
    }
    Allocation& a = g_table[slot];
    a.view = reinterpret_cast<uintptr_t>(view);
    a.size = size;
    a.host.store(reinterpret_cast<uintptr_t>(host), std::memory_order_release);
    if (slot == used) g_used.store(used + 1, std::memory_order_release);
    return host;
  }

  void deallocate(void* ptr) override {
    std::lock_guard<std::mutex> lock(g_alloc);
    const size_t used = g_used.load(std::memory_order_relaxed);
    for (size_t i = 0; i < used; ++i) {
      Allocation& a = g_table[i];
      if (a.host.load(std::memory_order_relaxed) != reinterpret_cast<uintptr_t>(ptr)) continue;
      a.host.store(0, std::memory_order_release);
      munmap(ptr, a.size);
      munmap(reinterpret_cast<void*>(a.view), a.size);
      return;
    }
  }

  bool owns(const void* ptr) const override { return find(ptr) != nullptr; }

  Error to_device(void* dst, const void* src, size_t n) override {
    void* d = view_of(dst, n);
    if (d == nullptr || owns(src)) return Error::InvalidArgument;
    std::memcpy(d, src, n);
    return Error::Ok;
  }

  Error to_host(void* dst, const void* src, size_t n) override {
    const void* s = view_of(src, n);
    if (s == nullptr || owns(dst)) return Error::InvalidArgument;
    std::memcpy(dst, s, n);
    return Error::Ok;
  }

  Error device_copy(void* dst, const void* src, size_t n) override {
    void* d = view_of(dst, n);
    const void* s = view_of(src, n);
    if (d == nullptr || s == nullptr) return Error::InvalidArgument;
    std::memmove(d, s, n);
    return Error::Ok;
  }
};

}  // namespace

Device& emulated_device() {
  static EmulatedDevice* d = new EmulatedDevice();  // lives as long as the process
  return *d;
}

#ifndef TTE_HAVE_CUDA
Device* cuda_device() { return nullptr; }
#endif

}  // namespace tte
