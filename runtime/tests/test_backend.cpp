// The backend "TensorRTBackend" with the reference engine, on payloads and blobs written by the
// Python side (gen_payloads.py): aliased KV output written in place through the caller's cache
// (every other page read-only), copy-back counted as exactly one buffer-sized copy, no heap
// allocation in execute, init/execute refusals with their logged reasons, and a delegated .pte
// run through ExecuTorch's own Program/Method.
#include "alloc_counter.h"
#include "blob_builder.h"
#include "check.h"
#include "pages.h"

#include <tte/backend.h>
#include <tte/c_api.h>
#include <tte/device.h>

#include "blob.h"
#include "counters.h"
#include "device.h"
#include "executor.h"
#include "refusal.h"

#include <executorch/extension/data_loader/buffer_data_loader.h>
#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::extension::make_tensor_ptr;
using executorch::extension::TensorPtr;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::BackendInterface;
using executorch::runtime::CompileSpec;
using executorch::runtime::DelegateHandle;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Span;

// aligned_alloc with an injectable failure (the reference engine's arenas come from it): while
// g_fail_aligned_alloc_at is n > 0, the n-th call after arming returns nullptr.
#if !defined(__SANITIZE_ADDRESS__)
extern "C" void* __libc_memalign(size_t, size_t);
namespace {
std::atomic<int> g_fail_aligned_alloc_at{0};
std::atomic<int> g_aligned_alloc_calls{0};
}  // namespace
extern "C" void* aligned_alloc(size_t alignment, size_t size) noexcept {
  const int n = g_fail_aligned_alloc_at.load();
  if (n > 0 && ++g_aligned_alloc_calls == n) return nullptr;
  return __libc_memalign(alignment, size);
}
#endif

namespace {

const std::string kPayloads = TTE_PAYLOADS_DIR;
const std::string kFixtures = TTE_FIXTURES_DIR;
constexpr size_t kHidden = 1024, kHeads = 2, kSmax = 4;

BackendInterface* backend() { return executorch::runtime::get_backend_class("TensorRTBackend"); }

struct Delegate {
  std::string blob;  // the processed bytes stay alive as long as the handle, as in ExecuTorch
  FreeableBuffer processed;
  executorch::extension::MallocMemoryAllocator allocator;
  DelegateHandle* handle = nullptr;
  Error init_error = Error::Ok;

  explicit Delegate(std::string b)
      : blob(std::move(b)), processed(blob.data(), blob.size(), nullptr) {
    BackendInitContext ctx(&allocator);
    auto r = backend()->init(ctx, &processed, {});
    if (r.ok()) {
      handle = r.get();
    } else {
      init_error = r.error();
    }
  }
  ~Delegate() {
    if (handle) backend()->destroy(handle);
  }
  Error execute(std::vector<EValue>& values) {
    std::vector<EValue*> args;
    for (auto& v : values) args.push_back(&v);
    return execute(args);
  }
  Error execute(std::vector<EValue*>& args) {  // allocates nothing itself
    BackendExecutionContext ctx;
    return backend()->execute(ctx, handle, Span<EValue*>(args.data(), args.size()));
  }
};

std::string payload_file(const char* name) { return tte_test::read_file(kPayloads + "/" + name); }

// The engine section of a blob (for re-wrapping a payload under other metadata).
std::string engine_of(const std::string& blob) {
  tte::Reason why;
  auto info = tte::parse_blob(blob.data(), blob.size(), why);
  return std::string(reinterpret_cast<const char*>(info.get().engine), info.get().engine_size);
}

// An engine whose run/copy/finish results are chosen by the test, counting the calls.
struct FakeEngine final : tte::Engine {
  Error run_result = Error::Ok, copy_result = Error::Ok, finish_result = Error::Ok;
  int runs = 0, copies = 0, finishes = 0;
  size_t copied = 0;
  // When set, finish refuses with it (check execute.finish), as the TensorRT engine's does.
  const char* finish_refusal = nullptr;
  std::vector<std::vector<uint8_t>> scratch;
  // What binding_type reports: (is_input, index) -> dtype, shape.
  std::vector<std::tuple<bool, size_t, tte::DType, std::vector<int64_t>>> types;
  const char* kind() const override { return "fake"; }
  bool binding_type(bool is_input, size_t index, tte::DType& dtype,
                    std::vector<int64_t>& shape) const override {
    for (const auto& [in, i, d, s] : types) {
      if (in == is_input && i == index) {
        dtype = d;
        shape = s;
        return true;
      }
    }
    return false;
  }
  executorch::runtime::Result<void*> allocate_scratch(size_t n, tte::Reason&) override {
    scratch.emplace_back(n);
    return static_cast<void*>(scratch.back().data());
  }
  // Dynamic shapes: the shapes set per call, the bytes each output was bound with, and the
  // output shape it reports after its run (every dynamic dimension = input 0's).
  std::vector<std::vector<int32_t>> input_shapes;
  std::vector<size_t> output_nbytes;
  bool ran = false;
  Error set_input_shape(size_t, const int32_t* sizes, size_t rank) override {
    input_shapes.emplace_back(sizes, sizes + rank);
    ran = false;
    return Error::Ok;
  }
  bool output_shape(size_t, int32_t* sizes, size_t rank) override {
    if (!ran || input_shapes.empty() || input_shapes.back().size() != rank) return false;
    std::copy(input_shapes.back().begin(), input_shapes.back().end(), sizes);
    return true;
  }
  Error bind_input(size_t, void*, size_t) override { return Error::Ok; }
  Error bind_output(size_t, void*, size_t n) override {
    output_nbytes.push_back(n);
    return Error::Ok;
  }
  Error run() override {
    ++runs;
    ran = run_result == Error::Ok;
    return run_result;
  }
  Error copy(void*, const void*, size_t n) override {
    ++copies;
    copied += n;
    return copy_result;
  }
  Error finish() override {
    ++finishes;
    if (finish_refusal != nullptr) tte::refuse("execute.finish", "%s", finish_refusal);
    return finish_result;
  }
};

// A DelegateExecutor over `blob` (read by parse_blob) driving a FakeEngine the test steers.
struct FakeDelegate {
  std::string blob;  // info.engine points into it
  tte::DelegateExecutor executor;
  FakeEngine* engine = nullptr;
};

std::unique_ptr<FakeDelegate> fake_delegate(std::string blob) {
  auto d = std::make_unique<FakeDelegate>();
  d->blob = std::move(blob);
  tte::Reason why;
  auto info = tte::parse_blob(d->blob.data(), d->blob.size(), why);
  if (!info.ok()) return nullptr;
  auto engine = std::make_unique<FakeEngine>();
  d->engine = engine.get();
  if (d->executor.init(std::move(info.get()), std::move(engine), why) != Error::Ok) {
    std::printf("  executor init failed: %s\n", why.text.c_str());
    return nullptr;
  }
  return d;
}

std::vector<EValue*> pointers(std::vector<EValue>& values) {
  std::vector<EValue*> args;
  for (auto& v : values) args.push_back(&v);
  return args;
}

}  // namespace

TEST(backend_is_registered_under_upstreams_id) {
  CHECK(tte::backend_registered());
  CHECK(backend() != nullptr);
  CHECK(backend()->is_available());
  CHECK_EQ(std::string(tte_runtime_version()), std::string("tte-runtime 0.1 (engines: reference)"));
}

TEST(kv_cache_written_in_place_and_step_copied_back_once) {
  Delegate d(payload_file("kv_step.blob"));
  REQUIRE(d.init_error == Error::Ok);
  tte_runtime_reset_counters();
  // cache [1, 2, 4, 1024] float32: one 4 KiB page per (head, position) row.
  tte_test::Pages cache_mem(kHeads * kSmax);
  auto* cache = reinterpret_cast<float*>(cache_mem.data());
  for (size_t i = 0; i < kHeads * kSmax * kHidden; ++i) cache[i] = 0.5f;
  std::vector<float> tok(kHeads * kHidden), logits(kHeads * kHidden, -1.f);
  std::vector<int64_t> pos = {0}, step = {10};
  auto t_tok = make_tensor_ptr({1, 2, 1, 1024}, tok.data(), ScalarType::Float);
  auto t_pos = make_tensor_ptr({1}, pos.data(), ScalarType::Long);
  auto t_cache = make_tensor_ptr({1, 2, 4, 1024}, cache, ScalarType::Float);
  auto t_step = make_tensor_ptr({1}, step.data(), ScalarType::Long);
  auto t_logits = make_tensor_ptr({1, 2, 1024}, logits.data(), ScalarType::Float);
  // delegate args in the blob's delegate_inputs order (tok, pos, cache, step), then logits
  std::vector<EValue> values = {EValue(*t_tok), EValue(*t_pos), EValue(*t_cache), EValue(*t_step),
                                EValue(*t_logits)};
  std::vector<EValue*> args;
  for (auto& v : values) args.push_back(&v);
  for (int64_t p = 0; p < static_cast<int64_t>(kSmax); ++p) {
    pos[0] = p;
    for (size_t h = 0; h < kHeads; ++h)
      for (size_t k = 0; k < kHidden; ++k) tok[h * kHidden + k] = float(p + 1) * 100 + float(h);
    // Only this position's rows may be written (pages h * kSmax + p). This also proves the
    // reference engine binds the cache without a copy: had Method::set_input copied it into an
    // arena, the kernel would see out (the caller's cache) != cache (the arena) and copy the
    // whole cache into the caller's memory -- a write to a read-only page.
    cache_mem.protect_all_but({static_cast<size_t>(p), kSmax + static_cast<size_t>(p)});
    Error e;
    size_t allocations;
    {
      tte_test::AllocCounter counter;
      e = d.execute(args);
      allocations = counter.count();
    }
    cache_mem.unprotect();
    REQUIRE(e == Error::Ok);
    if (tte_test::kCountsAllocations) CHECK_EQ(allocations, size_t(0));
    // the caller's cache holds the new rows; the other rows are untouched
    for (size_t h = 0; h < kHeads; ++h) {
      for (size_t s = 0; s < kSmax; ++s) {
        float want = int64_t(s) <= p ? float(s + 1) * 100 + float(h) : 0.5f;
        CHECK_EQ(cache[(h * kSmax + s) * kHidden + 7], want);
      }
    }
    // logits = sum over positions of the updated cache + the step before the call
    float sum = 0.5f * float(kSmax - 1 - p);
    for (int64_t s = 0; s <= p; ++s) sum += float(s + 1) * 100 + 1;
    CHECK_EQ(logits[kHidden + 3], sum + float(10 + p));
    CHECK_EQ(step[0], 11 + p);  // copy-back landed in the caller's step tensor
    // exactly one 8-byte copy per call for `step`, none for the aliased KV cache
    CHECK_EQ(tte_runtime_copy_bytes("step"), uint64_t(8 * (p + 1)));
    CHECK_EQ(tte_runtime_copy_bytes("layers.0.attn.k_cache"), uint64_t(0));
    CHECK_EQ(tte_runtime_execute_count(), uint64_t(p + 1));
  }
  tte_runtime_reset_counters();
  CHECK_EQ(tte_runtime_copy_bytes("step"), uint64_t(0));
  CHECK_EQ(tte_runtime_execute_count(), uint64_t(0));
}

TEST(ring_copy_back_is_exactly_one_buffer_sized_copy) {
  Delegate d(payload_file("ring.blob"));
  REQUIRE(d.init_error == Error::Ok);
  tte_runtime_reset_counters();
  std::vector<float> x(3), ring(12, 0.f), y(3);
  auto tx = make_tensor_ptr({3}, x.data(), ScalarType::Float);
  auto tring = make_tensor_ptr({4, 3}, ring.data(), ScalarType::Float);
  auto ty = make_tensor_ptr({3}, y.data(), ScalarType::Float);
  std::vector<EValue> args = {EValue(*tx), EValue(*tring), EValue(*ty)};
  for (int k = 1; k <= 5; ++k) {
    x = {float(k), float(10 * k), float(100 * k)};
    float old_sum = 0;
    for (int r = 0; r < 4; ++r) old_sum += ring[r * 3 + 1];
    REQUIRE(d.execute(args) == Error::Ok);
    CHECK_EQ(y[1], old_sum + float(10 * k));
    CHECK_EQ(ring[9], float(k));  // x shifted in at the end
    CHECK_EQ(ring[6], float(k > 1 ? k - 1 : 0));
    CHECK_EQ(tte_runtime_copy_bytes("ring.buf"), uint64_t(48 * k));
  }
  CHECK_EQ(tte_runtime_execute_count(), uint64_t(5));
}

// `calls` ring calls on a delegate of its own, counted into `tally` (one call's bytes: 48).
static void ring_calls_counted(tte::CopyTally& tally, int calls, Error& last) {
  Delegate d(payload_file("ring.blob"));
  if (d.init_error != Error::Ok) {
    last = d.init_error;
    return;
  }
  std::vector<float> x(3, 1.f), ring(12, 0.f), y(3);
  auto tx = make_tensor_ptr({3}, x.data(), ScalarType::Float);
  auto tring = make_tensor_ptr({4, 3}, ring.data(), ScalarType::Float);
  auto ty = make_tensor_ptr({3}, y.data(), ScalarType::Float);
  std::vector<EValue> args = {EValue(*tx), EValue(*tring), EValue(*ty)};
  last = Error::Ok;
  for (int k = 0; k < calls && last == Error::Ok; ++k) {
    tte::TallyScope counting(tally);
    last = d.execute(args);
    if (last == Error::Ok) tally.end_call();
  }
}

TEST(a_tally_counts_its_own_threads_calls_only) {
  Delegate first(payload_file("ring.blob"));  // creates the counter slot before the tallies
  REQUIRE(first.init_error == Error::Ok);
  tte_runtime_reset_counters();
  tte::CopyTally a, b, unsized;
  REQUIRE(a.size_to_counters() && b.size_to_counters());
  Error ea = Error::Internal, eb = Error::Internal;
  std::thread ta([&] { ring_calls_counted(a, 300, ea); });
  std::thread tb([&] { ring_calls_counted(b, 200, eb); });
  ta.join();
  tb.join();
  REQUIRE(ea == Error::Ok && eb == Error::Ok);
  CHECK_EQ(a.bytes("ring.buf", tte::CopyPath::Host), uint64_t(48 * 300));
  CHECK_EQ(b.bytes("ring.buf", tte::CopyPath::Host), uint64_t(48 * 200));
  CHECK_EQ(a.bytes("ring.buf", tte::CopyPath::Link) + a.bytes("ring.buf", tte::CopyPath::Device),
           uint64_t(0));
  CHECK_EQ(tte_runtime_copy_bytes("ring.buf"), uint64_t(48 * 500));  // the process's: both
  Error e;
  ring_calls_counted(unsized, 3, e);  // sized to no counter: it counts nothing, safely
  CHECK(e == Error::Ok);
  CHECK_EQ(unsized.bytes("ring.buf", tte::CopyPath::Host), uint64_t(0));
  CHECK_EQ(a.bytes("no.such.buffer", tte::CopyPath::Host), uint64_t(0));
  CHECK_EQ(a.bytes(nullptr, tte::CopyPath::Host), uint64_t(0));
  {
    tte::TallyScope counting(a);  // a call that does not end (failed): its bytes never join
    tte::count_copy(tte::copy_counter("ring.buf"), 1000, tte::CopyPath::Host);
  }
  CHECK_EQ(a.bytes("ring.buf", tte::CopyPath::Host), uint64_t(48 * 300));
  CHECK(tte::t_copy_tally == nullptr);  // every scope gave the thread's tally back
}

TEST(init_refuses_other_versions_and_engines_with_the_reason) {
  std::string blob = payload_file("ring.blob");
  blob[3] = '4';
  Delegate other(blob);
  CHECK(other.init_error == Error::DelegateInvalidCompatibility);
  CHECK(
      tte_test::logged("TensorRTBackend: init refused the delegate blob: unsupported blob "
                       "magic \"TR04\" (bytes 54 52 30 34): this reader accepts TR01, TR02 and "
                       "TR03"));
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("blob.magic"));
  tte_test::clear_logs();
  Delegate trt(tte_test::read_file(kFixtures + "/upstream_tr01.blob"));
  CHECK(trt.init_error == Error::NotSupported);
  CHECK(
      tte_test::logged("TR01 blob holds a TensorRT engine, but this runtime was built without "
                       "TensorRT (engines: reference)"));
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("engine.not_compiled"));
}

TEST(init_refuses_payloads_that_do_not_match_the_contract) {
  Delegate planned(payload_file("ring_planned_io.blob"));
  CHECK(planned.init_error == Error::InvalidProgram);
  CHECK(
      tte_test::logged("reference payload input 0 ('x') is memory planned: the engine could "
                       "not bind caller memory without a copy"));
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("payload.memory_planned_io"));
  tte_test::clear_logs();
  const std::string md = R"({"io_bindings":[
    {"name":"x","dtype":"float32","shape":[4],"is_input":true},
    {"name":"ring","dtype":"float32","shape":[4,3],"is_input":true},
    {"name":"y","dtype":"float32","shape":[3],"is_input":false},
    {"name":"ring_out","dtype":"float32","shape":[4,3],"is_input":false}],"aliased_io":[],
    "tte_version":3,"engine_kind":"reference","delegate_inputs":["x","ring"],
    "delegate_outputs":["y"],"copy_back":[{"output":"ring_out","input":"ring"}]})";
  tte_test::BlobFields f;
  f.metadata = md;
  f.engine = engine_of(payload_file("ring.blob"));
  Delegate shape(tte_test::build(f));
  CHECK(shape.init_error == Error::InvalidProgram);
  CHECK(
      tte_test::logged("reference payload input 0 ('x') has shape [3], the binding says "
                       "float32 [4]"));
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("payload.shape"));
  tte_test::clear_logs();
  f.engine = "not a program at all";
  Delegate garbage(tte_test::build(f));
  CHECK(garbage.init_error == Error::InvalidProgram);
  CHECK(tte_test::logged("reference payload (20 bytes) is not a loadable ExecuTorch program"));
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("payload.not_program"));
}

TEST(execute_refuses_wrong_tensors_naming_the_binding) {
  Delegate d(payload_file("ring.blob"));
  REQUIRE(d.init_error == Error::Ok);
  std::vector<float> x(4), ring(12), y(3);
  auto tx = make_tensor_ptr({4}, x.data(), ScalarType::Float);
  auto tring = make_tensor_ptr({4, 3}, ring.data(), ScalarType::Float);
  auto ty = make_tensor_ptr({3}, y.data(), ScalarType::Float);
  std::vector<EValue> args = {EValue(*tx), EValue(*tring), EValue(*ty)};
  CHECK(d.execute(args) == Error::InvalidArgument);
  CHECK(
      tte_test::logged("TensorRTBackend: delegate input 0 (binding 'x') holds 16 bytes, the "
                       "binding float32 [3] needs 12"));
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("execute.nbytes"));
  std::vector<EValue> few = {EValue(*tring), EValue(*ty)};
  CHECK(d.execute(few) == Error::InvalidArgument);
  CHECK(
      tte_test::logged("the delegate call has 2 arguments, the blob declares 2 inputs + 1 "
                       "outputs"));
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("execute.arity"));
  std::vector<int64_t> xi(3);
  auto txi = make_tensor_ptr({3}, xi.data(), ScalarType::Long);
  std::vector<EValue> typed = {EValue(*txi), EValue(*tring), EValue(*ty)};
  CHECK(d.execute(typed) == Error::InvalidArgument);
  CHECK(
      tte_test::logged("delegate input 0 (binding 'x') has scalar type Long, the binding is "
                       "float32"));
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("execute.dtype"));
}

TEST(unknown_aliased_pair_is_compared_on_the_tensors_at_execute) {
  // An upstream (torch-tensorrt 2.14.0 preprocess) TR02 blob: no binding has dtype or shape.
  using tte_test::upstream_binding;
  tte_test::BlobFields f;
  f.magic = "TR02";
  f.metadata = tte_test::upstream_metadata(
      {upstream_binding("cache_in", true), upstream_binding("tokens", true),
       upstream_binding("logits", false), upstream_binding("cache_out", false)},
      R"([{"output":"cache_out","input":"cache_in","kind":"kv_cache_update"}])");
  f.engine = "a TensorRT engine";
  const std::string blob = tte_test::build(f);
  // Without TensorRT, init gets past the blob and stops at the engine.
  Delegate d(blob);
  CHECK(d.init_error == Error::NotSupported);
  CHECK(
      tte_test::logged("TR02 blob holds a TensorRT engine, but this runtime was built without "
                       "TensorRT"));
  // An engine that cannot describe the bindings leaves the pair to the tensors.
  auto fake = fake_delegate(blob);
  REQUIRE(fake != nullptr);
  REQUIRE(fake->executor.plan().alias_checks.size() == 1);

  std::vector<float> cache(2 * 8 * 4), tokens(2 * 4), logits(2), out32(2 * 8 * 4);
  std::vector<uint16_t> out16(2 * 8 * 4);
  auto t_cache = make_tensor_ptr({1, 2, 8, 4}, cache.data(), ScalarType::Float);
  auto t_tokens = make_tensor_ptr({1, 2, 1, 4}, tokens.data(), ScalarType::Float);
  auto t_logits = make_tensor_ptr({1, 2}, logits.data(), ScalarType::Float);
  auto t_same = make_tensor_ptr({1, 2, 8, 4}, out32.data(), ScalarType::Float);
  auto t_half = make_tensor_ptr({1, 2, 8, 4}, out16.data(), ScalarType::Half);
  auto t_short = make_tensor_ptr({1, 2, 4, 4}, out32.data(), ScalarType::Float);
  auto check = [&](const TensorPtr& cache_out) {
    std::vector<EValue> values = {EValue(*t_cache), EValue(*t_tokens), EValue(*t_logits),
                                  EValue(*cache_out)};
    std::vector<EValue*> args = pointers(values);
    Error e;
    size_t allocations;
    {
      tte_test::AllocCounter counter;
      e = fake->executor.check_aliases(Span<EValue*>(args.data(), args.size()));
      allocations = counter.count();
    }
    if (tte_test::kCountsAllocations) CHECK_EQ(allocations, size_t(0));
    return e;
  };
  tte_test::clear_logs();
  CHECK(check(t_same) == Error::Ok);
  CHECK(!tte_test::logged("aliased pair"));
  CHECK(check(t_half) == Error::InvalidArgument);
  CHECK(
      tte_test::logged("TensorRTBackend: aliased pair 'cache_out' -> 'cache_in' differs at "
                       "execute: output tensor is Half (128 bytes), input tensor is Float "
                       "(256 bytes); the blob leaves their dtype/shape to the tensors"));
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("execute.alias_mismatch"));
  tte_test::clear_logs();
  CHECK(check(t_short) == Error::InvalidArgument);
  CHECK(
      tte_test::logged("TensorRTBackend: aliased pair 'cache_out' -> 'cache_in' differs at "
                       "execute: output tensor is Float (128 bytes), input tensor is Float "
                       "(256 bytes)"));
}

TEST(delegated_program_runs_through_executorch_method) {
  using executorch::runtime::HierarchicalAllocator;
  using executorch::runtime::MemoryManager;
  using executorch::runtime::Program;
  const std::string pte = payload_file("kv_step_outer.pte");
  executorch::extension::BufferDataLoader loader(pte.data(), pte.size());
  auto program = Program::load(&loader);
  REQUIRE(program.ok());
  auto meta = program->method_meta("forward");
  REQUIRE(meta.ok());
  CHECK(meta->uses_backend("TensorRTBackend"));
  std::vector<std::vector<uint8_t>> arenas;
  std::vector<Span<uint8_t>> spans;
  for (size_t i = 0; i < meta->num_memory_planned_buffers(); ++i) {
    arenas.emplace_back(static_cast<size_t>(meta->memory_planned_buffer_size(i).get()));
  }
  for (auto& a : arenas) spans.emplace_back(a.data(), a.size());
  HierarchicalAllocator planned({spans.data(), spans.size()});
  executorch::extension::MallocMemoryAllocator method_alloc, temp_alloc;
  MemoryManager mm(&method_alloc, &planned, &temp_alloc);
  auto method = program->load_method("forward", &mm);
  REQUIRE(method.ok());
  tte_runtime_reset_counters();
  std::vector<float> cache(kHeads * kSmax * kHidden, 0.f), tok(kHeads * kHidden);
  std::vector<int64_t> pos = {0}, step = {0};
  auto t_tok = make_tensor_ptr({1, 2, 1, 1024}, tok.data(), ScalarType::Float);
  auto t_pos = make_tensor_ptr({1}, pos.data(), ScalarType::Long);
  auto t_cache = make_tensor_ptr({1, 2, 4, 1024}, cache.data(), ScalarType::Float);
  auto t_step = make_tensor_ptr({1}, step.data(), ScalarType::Long);
  for (int64_t p = 0; p < 3; ++p) {
    pos[0] = p;
    std::fill(tok.begin(), tok.end(), float(p + 1));
    REQUIRE(method->set_input(EValue(*t_tok), 0) == Error::Ok);
    REQUIRE(method->set_input(EValue(*t_pos), 1) == Error::Ok);
    REQUIRE(method->set_input(EValue(*t_cache), 2) == Error::Ok);
    REQUIRE(method->set_input(EValue(*t_step), 3) == Error::Ok);
    REQUIRE(method->execute() == Error::Ok);
    const Tensor logits = method->get_output(0).toTensor();
    float want = float(p) * 1.f;  // old step
    for (int64_t s = 0; s <= p; ++s) want += float(s + 1);
    CHECK_EQ(logits.const_data_ptr<float>()[5], want);
    CHECK_EQ(cache[(1 * kSmax + p) * kHidden + 9], float(p + 1));  // written in place
    CHECK_EQ(step[0], p + 1);
  }
  CHECK_EQ(tte_runtime_copy_bytes("step"), uint64_t(24));
  CHECK_EQ(tte_runtime_copy_bytes("layers.0.attn.k_cache"), uint64_t(0));
  CHECK_EQ(tte_runtime_execute_count(), uint64_t(3));
}

TEST(reference_engine_allocation_failures_are_refused_naming_what) {
#if !defined(__SANITIZE_ADDRESS__)
  // ring.blob's init makes three aligned allocations: one memory-planned buffer, the temp
  // arena, the copy-back scratch. Failing each must refuse init, naming what it was for.
  const std::string blob = payload_file("ring.blob");
  const char* const why[] = {
      "cannot allocate 64 bytes for memory-planned buffer 0 of the reference payload's "
      "'forward' (bindings 'x', 'ring' -> 'y', 'ring_out')",
      "cannot allocate the 1048576-byte temp arena of the reference payload's 'forward' "
      "(bindings 'x', 'ring' -> 'y', 'ring_out')",
      "copy-back output 'ring_out': cannot allocate 48 scratch bytes"};
  for (int n = 1; n <= 4; ++n) {
    tte_test::clear_logs();
    g_aligned_alloc_calls = 0;
    g_fail_aligned_alloc_at = n;
    Error e;
    {
      Delegate d(blob);
      e = d.init_error;
    }
    g_fail_aligned_alloc_at = 0;
    if (n == 4) {
      CHECK(e == Error::Ok);  // no fourth allocation: nothing failed
      CHECK_EQ(g_aligned_alloc_calls.load(), 3);
    } else {
      CHECK(e == Error::MemoryAllocationFailed);
      CHECK(tte_test::logged(std::string("TensorRTBackend: init refused the delegate blob: ") +
                             why[n - 1]));
    }
  }
#endif
}

TEST(execute_refuses_a_tensor_in_another_dim_order) {
  Delegate d(payload_file("ring.blob"));
  REQUIRE(d.init_error == Error::Ok);
  std::vector<float> x(3), ring(12), y(3);
  auto tx = make_tensor_ptr({3}, x.data(), ScalarType::Float);
  // ring [4,3] stored column-major: dim order {1,0}, strides {1,4}
  auto tring = make_tensor_ptr({4, 3}, ring.data(), {1, 0}, {1, 4}, ScalarType::Float);
  auto ty = make_tensor_ptr({3}, y.data(), ScalarType::Float);
  std::vector<EValue> args = {EValue(*tx), EValue(*tring), EValue(*ty)};
  CHECK(d.execute(args) == Error::InvalidArgument);
  CHECK(
      tte_test::logged("TensorRTBackend: delegate input 1 (binding 'ring') has dim order "
                       "[1,0]; the engine reads its bindings as contiguous tensors in dim "
                       "order 0..n-1"));
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("execute.dim_order"));
}

TEST(engine_is_finished_on_every_path_once_it_ran) {
  const std::string ring = payload_file("ring.blob");
  tte_runtime_reset_counters();
  {
    auto d = fake_delegate(ring);
    REQUIRE(d != nullptr);
    REQUIRE(d->executor.plan().copies.size() == 1);
    d->engine->copy_result = Error::Internal;
    tte_runtime_clear_last_refusal();  // as execute does before prepare_args and forward
    CHECK(d->executor.forward() == Error::Internal);
    CHECK_EQ(d->engine->finishes, 1);  // the run may still be writing the caller's buffers
    CHECK(tte_test::logged("TensorRTBackend: copying output 'ring_out' into 'ring.buf' failed"));
    CHECK_EQ(std::string(tte_runtime_last_check()), std::string("execute.copy"));
    CHECK_EQ(tte_runtime_copy_bytes("ring.buf"), uint64_t(0));
  }
  {
    auto d = fake_delegate(ring);
    REQUIRE(d != nullptr);
    d->engine->run_result = Error::Internal;
    CHECK(d->executor.forward() == Error::Internal);
    CHECK_EQ(d->engine->finishes, 1);
    CHECK_EQ(d->engine->copies, 0);
  }
  {
    auto d = fake_delegate(ring);
    REQUIRE(d != nullptr);
    d->engine->finish_result = Error::Internal;
    CHECK(d->executor.forward() == Error::Internal);
    CHECK_EQ(d->engine->finishes, 1);
  }
  tte_runtime_reset_counters();  // the failed finish above came after a counted copy
  {
    auto d = fake_delegate(ring);
    REQUIRE(d != nullptr);
    size_t allocations;
    Error r;
    {
      tte_test::AllocCounter counter;
      r = d->executor.forward();
      allocations = counter.count();
    }
    CHECK(r == Error::Ok);
    if (tte_test::kCountsAllocations) CHECK_EQ(allocations, size_t(0));
    CHECK_EQ(d->engine->runs, 1);
    CHECK_EQ(d->engine->finishes, 1);
    CHECK_EQ(d->engine->copied, size_t(48));
    CHECK_EQ(tte_runtime_copy_bytes("ring.buf"), uint64_t(48));
  }
}

TEST(a_failing_finish_keeps_the_refusal_of_the_failed_run_or_copy) {
  // A sticky CUDA error fails the finish after a failed run or copy too; the finish refuses on
  // its own (logged), but the refusal kept is the one naming what failed first.
  const std::string ring = payload_file("ring.blob");
  for (const bool fail_run : {true, false}) {
    auto d = fake_delegate(ring);
    REQUIRE(d != nullptr);
    (fail_run ? d->engine->run_result : d->engine->copy_result) = Error::Internal;
    d->engine->finish_result = Error::Internal;
    d->engine->finish_refusal = "cudaStreamSynchronize failed: an illegal memory access";
    tte_test::clear_logs();
    tte_runtime_clear_last_refusal();  // as execute does before prepare_args and forward
    CHECK(d->executor.forward() == Error::Internal);
    CHECK_EQ(d->engine->finishes, 1);
    CHECK(tte_test::logged("cudaStreamSynchronize failed: an illegal memory access"));
    CHECK_EQ(std::string(tte_runtime_last_check()),
             std::string(fail_run ? "execute.engine_run" : "execute.copy"));
    CHECK_EQ(std::string(tte_runtime_last_refusal()),
             std::string(fail_run ? "TensorRTBackend: fake engine run failed (error 0x1)"
                                  : "TensorRTBackend: copying output 'ring_out' into 'ring.buf' "
                                    "failed (error 0x1)"));
  }
  // A finish that fails after a good run and its copies is itself the refusal.
  auto d = fake_delegate(ring);
  REQUIRE(d != nullptr);
  d->engine->finish_result = Error::Internal;
  d->engine->finish_refusal = "cudaStreamSynchronize failed: an illegal memory access";
  tte_runtime_clear_last_refusal();
  CHECK(d->executor.forward() == Error::Internal);
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("execute.finish"));
  CHECK_EQ(std::string(tte_runtime_last_refusal()),
           std::string("TensorRTBackend: fake engine did not finish (error 0x1): "
                       "cudaStreamSynchronize failed: an illegal memory access"));
  tte_runtime_reset_counters();  // the failed finish came after a counted copy
}

TEST(bindings_the_blob_does_not_size_are_sized_by_their_tensors) {
  // Upstream TR02 with unknown bindings: the aliased delegate output's copy is its tensor's size.
  using tte_test::upstream_binding;
  tte_test::BlobFields f;
  f.magic = "TR02";
  f.engine = "E";
  f.metadata = tte_test::upstream_metadata(
      {upstream_binding("cache_in", true), upstream_binding("cache_out", false)},
      R"([{"output":"cache_out","input":"cache_in","kind":"kv_cache_update"}])");
  auto p = fake_delegate(tte_test::build(f));
  REQUIRE(p != nullptr);
  std::vector<float> in(64), out(64);
  auto t_in = make_tensor_ptr({1, 2, 8, 4}, in.data(), ScalarType::Float);
  auto t_out = make_tensor_ptr({1, 2, 8, 4}, out.data(), ScalarType::Float);
  std::vector<EValue> io = {EValue(*t_in), EValue(*t_out)};
  std::vector<EValue*> io_args = pointers(io);
  REQUIRE(p->executor.prepare_args(Span<EValue*>(io_args.data(), io_args.size())) == Error::Ok);
  CHECK(p->executor.forward() == Error::Ok);
  CHECK_EQ(p->engine->copied, size_t(256));

  // A known pair with a dynamic dimension is compared on its tensors like an unknown one.
  f.metadata = tte_test::upstream_metadata(
      {R"({"name":"cache_in","dtype":"float32","shape":[1,-1,4],"is_input":true})",
       R"({"name":"cache_out","dtype":"float32","shape":[1,-1,4],"is_input":false})"},
      R"([{"output":"cache_out","input":"cache_in","kind":"kv_cache_update"}])");
  auto d = fake_delegate(tte_test::build(f));
  REQUIRE(d != nullptr);
  std::vector<float> a(32), b(16);
  auto ta = make_tensor_ptr({1, 8, 4}, a.data(), ScalarType::Float);
  auto tb = make_tensor_ptr({1, 4, 4}, b.data(), ScalarType::Float);
  std::vector<EValue> values = {EValue(*ta), EValue(*tb)};
  std::vector<EValue*> args = pointers(values);
  tte_test::clear_logs();
  CHECK(d->executor.prepare_args(Span<EValue*>(args.data(), 2)) == Error::InvalidArgument);
  CHECK(
      tte_test::logged("aliased pair 'cache_out' -> 'cache_in' differs at execute: output "
                       "tensor is Float (64 bytes), input tensor is Float (128 bytes); the "
                       "blob leaves their dynamic dimensions to the tensors"));
  values[1] = EValue(*ta);
  CHECK(d->executor.check_aliases(Span<EValue*>(args.data(), 2)) == Error::Ok);
}

// x [1,s,8] -> y [1,s,8], s up to 16, over a FakeEngine.
static std::unique_ptr<FakeDelegate> dynamic_fake_delegate() {
  tte_test::BlobFields f;
  f.metadata = R"({"io_bindings":[
    {"name":"x","dtype":"float32","shape":[1,-1,8],"is_input":true,"max_shape":[1,16,8]},
    {"name":"y","dtype":"float32","shape":[1,-1,8],"is_input":false,"max_shape":[1,16,8]}],
    "aliased_io":[],"tte_version":3,"engine_kind":"reference","delegate_inputs":["x"],
    "delegate_outputs":["y"]})";
  return fake_delegate(tte_test::build(f));
}

TEST(dynamic_bindings_are_shaped_per_call_within_their_max_shape) {
  auto d = dynamic_fake_delegate();
  REQUIRE(d != nullptr);
  std::vector<float> x(17 * 8), y(16 * 8);
  auto tx = make_tensor_ptr({1, 4, 8}, x.data(), ScalarType::Float);
  // the program plans the delegate output at its bound; its sizes are the last call's
  auto ty = make_tensor_ptr({1, 16, 8}, y.data(), ScalarType::Float);  // DYNAMIC_BOUND
  std::vector<EValue> values = {EValue(*tx), EValue(*ty)};
  std::vector<EValue*> args = pointers(values);
  REQUIRE(d->executor.prepare_args(Span<EValue*>(args.data(), 2)) == Error::Ok);
  CHECK(d->engine->input_shapes.back() == std::vector<int32_t>({1, 4, 8}));
  CHECK_EQ(d->engine->output_nbytes.back(), size_t(16 * 8 * 4));  // bound at its max_shape
  REQUIRE(d->executor.forward() == Error::Ok);
  CHECK_EQ(ty->size(1), 4);  // resized to the engine's shape for this call

  // A longer call: bound at the max again (not at the last call's 4 rows), then resized.
  auto tx9 = make_tensor_ptr({1, 9, 8}, x.data(), ScalarType::Float);
  values[0] = EValue(*tx9);
  REQUIRE(d->executor.prepare_args(Span<EValue*>(args.data(), 2)) == Error::Ok);
  CHECK_EQ(d->engine->output_nbytes.back(), size_t(16 * 8 * 4));
  REQUIRE(d->executor.forward() == Error::Ok);
  CHECK_EQ(ty->size(1), 9);

  // Beyond the bound: refused before the engine sees it, naming the binding and the bound.
  auto tx17 = make_tensor_ptr({1, 17, 8}, x.data(), ScalarType::Float);
  values[0] = EValue(*tx17);
  const size_t shapes_before = d->engine->input_shapes.size();
  tte_test::clear_logs();
  CHECK(d->executor.prepare_args(Span<EValue*>(args.data(), 2)) == Error::InvalidArgument);
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("execute.shape_bounds"));
  CHECK_EQ(std::string(tte_runtime_last_refusal()),
           std::string("TensorRTBackend: delegate input 0 (binding 'x') has shape [1,17,8], "
                       "beyond the binding's max_shape [1,16,8] (dimension 1); the engine was "
                       "built for no larger"));
  CHECK_EQ(d->engine->input_shapes.size(), shapes_before);
}

// A program exported without a dimension dynamic that its engine has (e.g. torch_tensorrt's
// dynamo.export without dynamic_shapes over an engine compiled from a dynamic program) holds the
// delegate output in a static tensor: bound at its own bytes, never resized beyond its shape.
static TensorPtr static_tensor(std::vector<executorch::aten::SizesType> sizes, float* data) {
  return make_tensor_ptr(std::move(sizes), data, ScalarType::Float,
                         executorch::aten::Device(executorch::aten::DeviceType::CPU),
                         executorch::aten::TensorShapeDynamism::STATIC);
}

TEST(a_static_output_over_a_dynamic_binding_keeps_its_shape) {
  auto d = dynamic_fake_delegate();
  REQUIRE(d != nullptr);
  std::vector<float> x(16 * 8), y(4 * 8);
  auto tx = make_tensor_ptr({1, 4, 8}, x.data(), ScalarType::Float);
  auto ty = static_tensor({1, 4, 8}, y.data());
  std::vector<EValue> values = {EValue(*tx), EValue(*ty)};
  std::vector<EValue*> args = pointers(values);
  REQUIRE(d->executor.prepare_args(Span<EValue*>(args.data(), 2)) == Error::Ok);
  CHECK_EQ(d->engine->output_nbytes.back(), size_t(4 * 8 * 4));  // its own bytes, not the max's
  REQUIRE(d->executor.forward() == Error::Ok);
  CHECK_EQ(ty->size(1), 4);

  // The engine's output at another shape: refused after the run, naming the static tensor.
  auto tx6 = make_tensor_ptr({1, 6, 8}, x.data(), ScalarType::Float);
  values[0] = EValue(*tx6);
  REQUIRE(d->executor.prepare_args(Span<EValue*>(args.data(), 2)) == Error::Ok);
  CHECK(d->executor.forward() != Error::Ok);
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("execute.output_resize"));
  CHECK_EQ(std::string(tte_runtime_last_refusal()),
           std::string("TensorRTBackend: delegate output 0 (binding 'y', max_shape [1,16,8]) has "
                       "shape [1,6,8] at this call, but the program holds it in a static tensor "
                       "of shape [1,4,8] (exported without the dynamic dimension the engine has; "
                       "export with dynamic_shapes to take other shapes)"));
  CHECK_EQ(ty->size(1), 4);
}

TEST(the_reference_engine_writes_a_static_output_over_a_dynamic_binding_within_its_bytes) {
  Delegate d(payload_file("dynamic_affine.blob"));  // x [1,s,8] -> 2x + 1, s up to 16
  REQUIRE(d.init_error == Error::Ok);
  constexpr float kGuard = -7.f;
  std::vector<float> x(16 * 8), y(6 * 8 + 8, kGuard);  // 8 floats past the tensor: untouched
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) / 4;
  auto tx = make_tensor_ptr({1, 6, 8}, x.data(), ScalarType::Float);
  auto ty = static_tensor({1, 6, 8}, y.data());
  std::vector<EValue> values = {EValue(*tx), EValue(*ty)};
  for (int call = 0; call < 2; ++call) {  // a second call: the staging is reused
    REQUIRE(d.execute(values) == Error::Ok);
    for (size_t i = 0; i < 6 * 8; ++i) CHECK_EQ(y[i], 2 * x[i] + 1);
    for (size_t i = 6 * 8; i < y.size(); ++i) CHECK_EQ(y[i], kGuard);
  }

  // A longer input than the static output holds: the payload's 9 rows stay in its staging.
  std::fill(y.begin(), y.end(), kGuard);
  auto tx9 = make_tensor_ptr({1, 9, 8}, x.data(), ScalarType::Float);
  values[0] = EValue(*tx9);
  tte_test::clear_logs();
  CHECK(d.execute(values) != Error::Ok);
  CHECK(
      tte_test::logged("TensorRTBackend: reference engine output 0 came out 288 bytes; the "
                       "tensor bound to it holds 192"));
  for (float v : y) CHECK_EQ(v, kGuard);
}

TEST(unknown_bindings_take_the_engines_types_at_init) {
  // What upstream's preprocess writes: no dtype or shape for any binding.
  using tte_test::upstream_binding;
  tte_test::BlobFields f;
  f.magic = "TR02";
  f.engine = "E";
  f.metadata = tte_test::upstream_metadata(
      {upstream_binding("cache_in", true), upstream_binding("tokens", true),
       upstream_binding("logits", false), upstream_binding("cache_out", false)},
      R"([{"output":"cache_out","input":"cache_in","kind":"kv_cache_update"}])");
  const std::string blob = tte_test::build(f);
  tte::Reason why;
  auto info = tte::parse_blob(blob.data(), blob.size(), why);
  REQUIRE(info.ok());
  using tte::DType;
  FakeEngine e;
  e.types = {{true, 0, DType::Float32, {1, 2, 8, 4}},
             {true, 1, DType::Float32, {1, 2, 1, 4}},
             {false, 0, DType::Float32, {1, 2}},
             {false, 1, DType::Float32, {1, 2, 8, 4}}};
  tte::BlobInfo resolved = info.get();
  REQUIRE(tte::resolve_unknown_bindings(resolved, e, why) == Error::Ok);
  CHECK(resolved.inputs[0].known);
  CHECK_EQ(resolved.inputs[0].describe(), std::string("float32 [1,2,8,4]"));
  CHECK_EQ(resolved.outputs[0].describe(), std::string("float32 [1,2]"));
  auto plan = tte::plan_bindings(resolved, why);
  REQUIRE(plan.ok());
  CHECK(plan->alias_checks.empty());  // compared here, not at every execute
  REQUIRE(plan->copies.size() == 1);
  CHECK(!plan->copies[0].sized_by_tensor);
  CHECK_EQ(plan->copies[0].nbytes, size_t(256));

  // The engine runs the aliased pair with different types: refused at init, naming both.
  std::get<2>(e.types[3]) = DType::Float16;
  resolved = info.get();
  CHECK(tte::resolve_unknown_bindings(resolved, e, why) == Error::InvalidProgram);
  CHECK_EQ(std::string(why.check), std::string("aliased.mismatch"));
  CHECK_EQ(why.text,
           std::string("with the dtypes and shapes the fake engine gives the bindings the "
                       "blob leaves unknown: aliased pair 'cache_out' -> 'cache_in' differs: "
                       "output is float16 [1,2,8,4], input is float32 [1,2,8,4]"));

  // An engine that cannot tell leaves them unknown (sized by the tensors at execute).
  FakeEngine silent;
  resolved = info.get();
  CHECK(tte::resolve_unknown_bindings(resolved, silent, why) == Error::Ok);
  CHECK(!resolved.inputs[0].known && !resolved.outputs[1].known);
}

TEST(c_api_never_allocates_locks_or_throws) {
  static_assert(noexcept(tte_runtime_copy_bytes("x")));
  static_assert(noexcept(tte_runtime_execute_count()));
  static_assert(noexcept(tte_runtime_reset_counters()));
  static_assert(noexcept(tte_runtime_version()));
  static_assert(noexcept(tte_runtime_last_check()));
  Delegate d(payload_file("kv_step.blob"));  // creates the counter slots of its buffers
  REQUIRE(d.init_error == Error::Ok);
  const std::string unknown(200, 'k');  // keys past any small-string buffer
  size_t allocations;
  uint64_t sum = 0;
  {
    tte_test::AllocCounter counter;
    sum += tte_runtime_copy_bytes("layers.0.attn.k_cache");
    sum += tte_runtime_copy_bytes(unknown.c_str());
    sum += tte_runtime_copy_bytes(nullptr);
    sum += tte_runtime_execute_count();
    tte_runtime_reset_counters();
    sum += tte_runtime_version()[0];
    sum += tte_runtime_last_check()[0];
    allocations = counter.count();
  }
  CHECK(sum > 0);
  if (tte_test::kCountsAllocations) CHECK_EQ(allocations, size_t(0));
  CHECK_EQ(std::string(tte_runtime_version()),
           std::string("tte-runtime 0.1 (engines: ") + tte::compiled_engines() + ")");
}

// The copies of one call in device memory go as one batch, which runs them in no
// particular order — so a batch whose ranges overlap is refused (execute.copy_overlap, naming both
// buffers) before anything is copied; checked again whenever the caller's addresses change. Last in
// this file: the device chosen stays in force for the process.
TEST(a_batch_of_overlapping_device_copies_is_refused_naming_both_buffers) {
  std::string why;
  REQUIRE(tte::use_device("emulated", why) == 0);
  auto d = fake_delegate(tte_test::build([] {
    tte_test::BlobFields f;
    f.metadata = R"({"io_bindings":[
     {"name":"a","dtype":"float32","shape":[4],"is_input":true},
     {"name":"b","dtype":"float32","shape":[4],"is_input":true},
     {"name":"new_a","dtype":"float32","shape":[4],"is_input":false},
     {"name":"new_b","dtype":"float32","shape":[4],"is_input":false}],
     "tte_version":3,"engine_kind":"reference","delegate_inputs":["a","b"],
     "delegate_outputs":["new_a","new_b"],
     "buffers":[{"input":"a","fqn":"state.a"},{"input":"b","fqn":"state.b"}],
     "copy_back":[{"output":"new_a","input":"a"},{"output":"new_b","input":"b"}]})";
    return f;
  }()));
  REQUIRE(d != nullptr);
  REQUIRE(d->executor.plan().copies.size() == 2);
  tte::Device& dev = tte::emulated_device();
  auto state = dev.allocate(64), outs = dev.allocate(32);  // the host never touches either
  REQUIRE(state.ok() && outs.ok());
  auto* s = static_cast<float*>(state.get());
  auto* o = static_cast<float*>(outs.get());
  auto run_with_b_at = [&](float* b) {
    auto ta = make_tensor_ptr({4}, s, ScalarType::Float);
    auto tb = make_tensor_ptr({4}, b, ScalarType::Float);
    auto tna = make_tensor_ptr({4}, o, ScalarType::Float);
    auto tnb = make_tensor_ptr({4}, o + 4, ScalarType::Float);
    std::vector<EValue> values = {EValue(*ta), EValue(*tb), EValue(*tna), EValue(*tnb)};
    std::vector<EValue*> args = pointers(values);
    tte_runtime_clear_last_refusal();
    const Error e = d->executor.prepare_args(Span<EValue*>(args.data(), args.size()));
    return e != Error::Ok ? e : d->executor.forward();
  };
  tte_runtime_reset_counters();
  CHECK(run_with_b_at(s + 4) == Error::Ok);  // apart: one batch of two 16-byte copies
  CHECK_EQ(d->engine->copies, 2);
  CHECK_EQ(tte_runtime_copy_bytes("state.a") + tte_runtime_copy_bytes("state.b"), uint64_t(32));
  tte_test::clear_logs();
  CHECK(run_with_b_at(s + 2) == Error::InvalidProgram);  // b's first 8 bytes are a's last 8
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("execute.copy_overlap"));
  CHECK(
      tte_test::logged("TensorRTBackend: the copy into 'state.a' overlaps the copy of "
                       "'state.b'; the buffers' memory must not overlap (nothing was copied)"));
  CHECK_EQ(d->engine->copies, 2);  // nothing copied
  CHECK_EQ(tte_runtime_copy_bytes("state.a") + tte_runtime_copy_bytes("state.b"), uint64_t(32));
  CHECK_EQ(d->engine->finishes, 2);          // the run may still be writing: finished all the same
  CHECK(run_with_b_at(s + 8) == Error::Ok);  // apart again: checked again, copied
  CHECK_EQ(d->engine->copies, 4);
  dev.deallocate(state.get());
  dev.deallocate(outs.get());
  tte_runtime_reset_counters();
}

TEST_MAIN()
