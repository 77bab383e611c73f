// The emulated device (device.h): device memory the host cannot touch, reached only through the
// device's copies; a host touch faults and is reported naming the allocation; ExecuTorch's
// allocator registry answers with it once it is in force; a device-aware loader writes device
// memory through the device, never with host code.
#include <tte/device.h>

#include "check.h"
#include "device.h"

#include <executorch/runtime/core/device_allocator.h>

#include <sys/wait.h>
#include <unistd.h>
#include <cstring>
#include <string>
#include <vector>

using executorch::runtime::DataLoader;
using executorch::runtime::Error;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Result;
using tte::Device;

namespace {

Device& dev() { return tte::emulated_device(); }

// A loader over a host byte vector whose load_into writes with memcpy, as ExecuTorch's do.
class VectorLoader final : public DataLoader {
 public:
  explicit VectorLoader(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  Result<FreeableBuffer> load(size_t offset, size_t size, const SegmentInfo&) const override {
    return FreeableBuffer(bytes_.data() + offset, size, nullptr);
  }
  Error load_into(size_t offset, size_t size, const SegmentInfo&, void* buffer) const override {
    std::memcpy(buffer, bytes_.data() + offset, size);  // a host write: faults on device memory
    ++host_writes;
    return Error::Ok;
  }
  Result<size_t> size() const override { return bytes_.size(); }
  mutable int host_writes = 0;

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace

TEST(bytes_go_in_and_out_only_through_the_device) {
  auto a = dev().allocate(100);
  auto b = dev().allocate(100);
  REQUIRE(a.ok() && b.ok());
  CHECK(dev().owns(a.get()));
  CHECK(dev().owns(static_cast<char*>(a.get()) + 99));
  int host = 0;
  CHECK(!dev().owns(&host));
  std::vector<uint8_t> in(100), out(100, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7);
  CHECK(dev().to_device(a.get(), in.data(), in.size()) == Error::Ok);
  CHECK(dev().device_copy(b.get(), a.get(), in.size()) == Error::Ok);
  CHECK(dev().to_host(out.data(), b.get(), out.size()) == Error::Ok);
  CHECK(out == in);
  dev().deallocate(a.get());
  dev().deallocate(b.get());
  CHECK(!dev().owns(a.get()));
}

// The batched copy-back: every range lands, each from its own source; a range past
// its allocation is refused like a single copy.
TEST(a_batch_of_device_copies_lands_every_range) {
  std::vector<void*> mem;
  std::vector<tte::CopyRange> batch;
  std::vector<std::vector<uint8_t>> want;
  for (size_t k = 0; k < 3; ++k) {
    const size_t n = 16 + 40 * k;
    auto src = dev().allocate(n);
    auto dst = dev().allocate(n);
    REQUIRE(src.ok() && dst.ok());
    std::vector<uint8_t> bytes(n);
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(k * 31 + i);
    REQUIRE(dev().to_device(src.get(), bytes.data(), n) == Error::Ok);
    batch.push_back({dst.get(), src.get(), n});
    want.push_back(bytes);
    mem.push_back(src.get());
    mem.push_back(dst.get());
  }
  CHECK(dev().device_copy_batch(batch.data(), batch.size()) == Error::Ok);
  for (size_t k = 0; k < batch.size(); ++k) {
    std::vector<uint8_t> got(batch[k].nbytes);
    CHECK(dev().to_host(got.data(), batch[k].dst, got.size()) == Error::Ok);
    CHECK(got == want[k]);
  }
  batch[1].nbytes = 8192;
  CHECK(dev().device_copy_batch(batch.data(), batch.size()) == Error::InvalidArgument);
  for (void* p : mem) dev().deallocate(p);
}

TEST(a_copy_past_the_end_of_an_allocation_is_refused) {
  auto a = dev().allocate(64);  // one page is mapped; the allocation's range is the page
  REQUIRE(a.ok());
  std::vector<uint8_t> in(8192);
  CHECK(dev().to_device(a.get(), in.data(), in.size()) == Error::InvalidArgument);
  CHECK(dev().to_host(in.data(), a.get(), in.size()) == Error::InvalidArgument);
  // host-to-host through the device is not a device copy
  CHECK(dev().to_device(in.data(), in.data() + 16, 8) == Error::InvalidArgument);
  dev().deallocate(a.get());
}

TEST(a_host_touch_of_device_memory_faults_and_names_the_allocation) {
  auto a = dev().allocate(4096);
  REQUIRE(a.ok());
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    dup2(fds[1], 2);
    volatile float* p = static_cast<float*>(a.get());
    p[3] = 1.0f;  // what a host kernel or memcpy would do
    _exit(0);     // not reached
  }
  close(fds[1]);
  std::string err;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) err.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
  char where[64];
  std::snprintf(where, sizeof where, "at 0x%016lx", reinterpret_cast<unsigned long>(a.get()) + 12);
  CHECK(err.find("tte emulated device: host code touched device memory ") == 0);
  CHECK(err.find(where) != std::string::npos);
  CHECK(err.find("(a device allocation of 4096 bytes") != std::string::npos);
  dev().deallocate(a.get());
}

TEST(in_force_it_is_executorchs_cuda_allocator) {
  std::string why;
  CHECK_EQ(tte::use_device("emulated", why), 0);
  CHECK_EQ(std::string(tte::device_name()), std::string("emulated"));
  CHECK(tte::active_device() == &dev());
  CHECK_EQ(tte::use_device("emulated", why), 0);  // again: the same device, no change
  CHECK(tte::use_device("none", why) != 0);
  CHECK_EQ(why, std::string("device emulated is already in force"));
  auto* et =
      executorch::runtime::get_device_allocator(executorch::runtime::etensor::DeviceType::CUDA);
  REQUIRE(et != nullptr);
  auto p = et->allocate(256, 0);
  REQUIRE(p.ok());
  CHECK(dev().owns(p.get()));
  const float x[4] = {1, 2, 3, 4};
  float y[4] = {0, 0, 0, 0};
  CHECK(et->copy_host_to_device(p.get(), x, sizeof x, 0) == Error::Ok);
  CHECK(et->copy_device_to_host(y, p.get(), sizeof y, 0) == Error::Ok);
  CHECK(std::memcmp(x, y, sizeof x) == 0);
  // copy_any picks the direction from where each side lives (the device in force)
  float z[4] = {0, 0, 0, 0};
  auto q = dev().allocate(sizeof z);
  REQUIRE(q.ok());
  CHECK(tte::copy_any(q.get(), p.get(), sizeof z) == Error::Ok);
  CHECK(tte::copy_any(z, q.get(), sizeof z) == Error::Ok);
  CHECK(std::memcmp(x, z, sizeof x) == 0);
  dev().deallocate(q.get());
  et->deallocate(p.get(), 0);
}

TEST(a_device_aware_loader_writes_device_memory_through_the_device) {
  std::string why;
  REQUIRE(tte::use_device("emulated", why) == 0);
  std::vector<uint8_t> bytes(64);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(255 - i);
  auto inner = std::make_unique<VectorLoader>(bytes);
  VectorLoader* raw = inner.get();
  auto loader = tte::device_aware(std::move(inner));
  auto d = dev().allocate(32);
  REQUIRE(d.ok());
  const DataLoader::SegmentInfo info(DataLoader::SegmentInfo::Type::Mutable);
  CHECK(loader->load_into(16, 32, info, d.get()) == Error::Ok);
  CHECK_EQ(raw->host_writes, 0);
  std::vector<uint8_t> got(32);
  CHECK(dev().to_host(got.data(), d.get(), got.size()) == Error::Ok);
  CHECK(std::vector<uint8_t>(bytes.begin() + 16, bytes.begin() + 48) == got);
  std::vector<uint8_t> host(8);  // host memory: the inner loader's own load_into
  CHECK(loader->load_into(0, 8, info, host.data()) == Error::Ok);
  CHECK_EQ(raw->host_writes, 1);
  CHECK(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 8) == host);
  dev().deallocate(d.get());
}

TEST(the_emulated_device_takes_a_callers_stream_but_makes_none) {
  std::string why;
  REQUIRE(tte::use_device("emulated", why) == 0);
  CHECK(tte::new_stream(why) == nullptr);
  CHECK_EQ(why, std::string("device emulated has no streams"));
  int token = 0;  // a caller's stream is only ever passed along
  CHECK_EQ(tte::use_stream(&token, why), 0);
  CHECK(tte::active_device()->stream() == &token);
  CHECK_EQ(tte::use_stream(nullptr, why), 0);
  CHECK(tte::active_device()->stream() == nullptr);
}

TEST(an_unknown_device_kind_is_refused_naming_the_kinds) {
  std::string why;
  CHECK_EQ(tte::use_device("tpu", why), static_cast<int>(Error::InvalidArgument));
  CHECK_EQ(why, std::string("unknown device kind 'tpu' (cuda, emulated, auto or none)"));
}

TEST_MAIN()
