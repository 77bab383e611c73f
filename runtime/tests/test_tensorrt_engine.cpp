// The TensorRT engine's own logic (tensorrt_engine.cpp) over a fake TrtApi (fake_trt.h): binding
// by name, the device-memory check, aliasing verified against the engine, the weight streaming
// budget, the engine kinds a runtime without an SDK refuses, TensorRT-RTX's devices. What the
// real adapter does with nvinfer1 is compile-checked only (scripts/check_tensorrt_headers.sh).
#include "check.h"
#include "dtype.h"
#include "engine.h"
#include "engine_factory.h"
#include "fake_trt.h"
#include "refusal.h"
#include "tensorrt_engine.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

using tte::Binding;
using tte::BlobInfo;
using tte::DType;
using tte::Error;
using tte::TrtIo;
using tte_test::dims;
using tte_test::FakeTensor;
using tte_test::FakeTrt;
using tte_test::FakeTrtState;

namespace {

Binding binding(const char* name, std::vector<int64_t> shape, bool is_input, size_t index) {
  Binding b;
  b.name = name;
  b.dtype = DType::Float32;
  b.shape = std::move(shape);
  b.is_input = is_input;
  b.index = index;
  return b;
}

// x [4] -> y = x + 1; cache [8] written in place (cache_out aliases cache, as the blob records).
BlobInfo kv_blob() {
  BlobInfo info;
  std::memcpy(info.magic, "TR03", 4);
  info.format = 3;
  info.inputs = {binding("x", {4}, true, 0), binding("cache", {8}, true, 1)};
  info.outputs = {binding("y", {4}, false, 0), binding("cache_out", {8}, false, 1)};
  info.aliased_io = {{"cache_out", "cache", "kv_cache_update"}};
  return info;
}

std::vector<FakeTensor> kv_tensors() {
  return {{"x", TrtIo::Input, 0, dims({4})},
          {"cache", TrtIo::Input, 0, dims({8})},
          {"y", TrtIo::Output, 0, dims({4}), "x"},
          {"cache_out", TrtIo::Output, 0, dims({8}), "cache", "cache"}};
}

struct Built {
  std::unique_ptr<tte::Engine> engine;
  FakeTrt* api = nullptr;  // owned by the engine
  Error error = Error::Ok;
  tte::Reason why;
};

Built build(const BlobInfo& info, std::vector<FakeTensor> tensors, FakeTrtState& state) {
  Built b;
  auto api = std::make_unique<FakeTrt>(std::move(tensors), state);
  b.api = api.get();
  auto e = tte::create_tensorrt_engine_over(std::move(api), info, b.why);
  if (e.ok()) {
    b.engine = std::move(e.get());
  } else {
    b.error = e.error();
    b.api = nullptr;
  }
  return b;
}

}  // namespace

TEST(binds_by_name_writes_the_aliased_output_through_its_input_and_waits_once) {
  FakeTrtState state;
  Built b = build(kv_blob(), kv_tensors(), state);
  REQUIRE(b.engine != nullptr);
  CHECK_EQ(std::string(b.engine->kind()), std::string("tensorrt"));
  float* x = static_cast<float*>(b.engine->allocate_scratch(16, b.why).get());
  float* cache = static_cast<float*>(b.engine->allocate_scratch(32, b.why).get());
  float* y = static_cast<float*>(b.engine->allocate_scratch(16, b.why).get());
  for (int i = 0; i < 4; ++i) x[i] = static_cast<float>(i);
  for (int step = 1; step <= 3; ++step) {
    REQUIRE(b.engine->bind_input(0, x, 16) == Error::Ok);
    REQUIRE(b.engine->bind_input(1, cache, 32) == Error::Ok);
    REQUIRE(b.engine->bind_output(0, y, 16) == Error::Ok);
    REQUIRE(b.engine->bind_output(1, cache, 32) == Error::Ok);  // the executor's aliased binding
    REQUIRE(b.engine->run() == Error::Ok);
    REQUIRE(b.engine->finish() == Error::Ok);
    CHECK_EQ(y[3], 4.0f);
    CHECK_EQ(cache[7], static_cast<float>(step));  // written in place, step after step
  }
  CHECK_EQ(state.addresses["y"], static_cast<void*>(y));
  CHECK_EQ(state.enqueues, 3);
}

TEST(a_host_address_is_refused_naming_the_binding) {
  FakeTrtState state;
  Built b = build(kv_blob(), kv_tensors(), state);
  REQUIRE(b.engine != nullptr);
  float host[4] = {0, 0, 0, 0};
  tte::clear_refusal();
  CHECK(b.engine->bind_input(0, host, 16) == Error::InvalidArgument);
  CHECK_EQ(std::string(tte::last_check()), std::string("execute.host_pointer"));
  CHECK(std::string(tte::last_refusal()).find("input 'x' (float32 [4]) is bound to host memory") !=
        std::string::npos);
  void* dev = b.engine->allocate_scratch(16, b.why).get();
  CHECK(b.engine->bind_input(0, dev, 12) == Error::InvalidArgument);  // 12 bytes for 16
  CHECK_EQ(std::string(tte::last_check()), std::string("execute.nbytes"));
}

TEST(an_output_the_engine_aliases_but_the_blob_does_not_is_refused) {
  FakeTrtState state;
  BlobInfo info = kv_blob();
  info.aliased_io.clear();
  Built b = build(info, kv_tensors(), state);
  CHECK(b.engine == nullptr);
  CHECK(b.error == Error::InvalidProgram);
  CHECK_EQ(std::string(b.why.check), std::string("tensorrt.aliasing"));
  CHECK_EQ(b.why.text,
           std::string("output binding 'cache_out' aliases input 'cache' in the FakeRT 1.0 "
                       "engine (getAliasedInputTensor), but the blob's aliased_io says none: the "
                       "recorded aliasing of this engine is wrong, and binding by it would lose "
                       "or misplace a cache write; re-export the .pte"));
  CHECK(!state.context);  // refused before anything was created or bound
}

TEST(an_output_the_blob_aliases_but_the_engine_does_not_is_refused) {
  FakeTrtState state;
  std::vector<FakeTensor> tensors = kv_tensors();
  tensors[3].alias = "";  // the engine computes cache_out into its own memory
  Built b = build(kv_blob(), tensors, state);
  CHECK(b.engine == nullptr);
  CHECK(b.why.text.find("output binding 'cache_out' aliases input none in the FakeRT 1.0 "
                        "engine (getAliasedInputTensor), but the blob's aliased_io says "
                        "'cache'") == 0);
}

TEST(without_the_query_the_blobs_record_is_used_and_said_to_be_unverified) {
  FakeTrtState state;
  state.alias_known = false;  // TensorRT before 10.15
  BlobInfo info = kv_blob();
  Built b = build(info, kv_tensors(), state);
  CHECK(b.engine != nullptr);
  CHECK(
      tte_test::logged("cannot report which input an output aliases (before TensorRT 10.15): "
                       "the blob's aliased_io (1 outputs) is used as recorded, unverified"));
}

TEST(the_weight_streaming_budget_is_set_before_the_context_exists) {
  FakeTrtState state;
  state.streamable = 4096;
  BlobInfo info = kv_blob();
  info.weight_streaming_budget = 1024;
  Built b = build(info, kv_tensors(), state);
  REQUIRE(b.engine != nullptr);
  CHECK_EQ(state.budget, int64_t{1024});
  CHECK(!state.context_when_budget_set && state.context);
}

TEST(a_budget_for_an_engine_that_cannot_stream_is_ignored_saying_so) {
  FakeTrtState state;  // streamable 0
  BlobInfo info = kv_blob();
  info.weight_streaming_budget = 1024;
  Built b = build(info, kv_tensors(), state);
  CHECK(b.engine != nullptr);
  CHECK_EQ(state.budget, int64_t{-1});
  CHECK(
      tte_test::logged("weight_streaming_budget 1024 ignored: the engine was built without "
                       "weight streaming (enable_weight_streaming=True)"));
}

TEST(a_budget_the_sdk_refuses_refuses_the_delegate) {
  FakeTrtState state;
  state.streamable = 4096;
  state.accept_budget = false;
  BlobInfo info = kv_blob();
  info.weight_streaming_budget = 1 << 20;
  Built b = build(info, kv_tensors(), state);
  CHECK(b.engine == nullptr);
  CHECK_EQ(b.why.text, std::string("FakeRT 1.0 refused the weight streaming budget of 1048576 "
                                   "bytes (the engine streams 4096 bytes of weights): fake error"));
}

TEST(types_shapes_and_counts_are_checked_against_the_engine) {
  FakeTrtState s1;
  std::vector<FakeTensor> t = kv_tensors();
  t[0].dtype = 1;  // kHALF
  Built b = build(kv_blob(), t, s1);
  CHECK_EQ(b.why.text, std::string("TensorRT input 'x' is float16, the binding says float32 [4]"));

  FakeTrtState s2;
  t = kv_tensors();
  t[0].dims = dims({5});
  b = build(kv_blob(), t, s2);
  CHECK_EQ(b.why.text,
           std::string("TensorRT input 'x' has shape [5], the binding says float32 [4]"));

  FakeTrtState s3;
  t = kv_tensors();
  t.pop_back();
  b = build(kv_blob(), t, s3);
  CHECK_EQ(b.why.text,
           std::string("the FakeRT 1.0 engine has 3 I/O tensors, the blob declares 4 bindings"));

  FakeTrtState s4;
  BlobInfo info = kv_blob();
  info.inputs[0].shape = {-1};
  b = build(info, kv_tensors(), s4);
  CHECK_EQ(std::string(b.why.check), std::string("tensorrt.dynamic_shape"));
}

namespace {

// A prefill: x [T,4] -> y = x + 1 [T,4], T bounded by the blob at 8.
BlobInfo prefill_blob() {
  BlobInfo info;
  std::memcpy(info.magic, "TR03", 4);
  info.format = 3;
  info.inputs = {binding("x", {-1, 4}, true, 0)};
  info.outputs = {binding("y", {-1, 4}, false, 0)};
  info.inputs[0].max_shape = {8, 4};
  info.outputs[0].max_shape = {8, 4};
  return info;
}

std::vector<FakeTensor> prefill_tensors() {
  return {{"x", TrtIo::Input, 0, dims({-1, 4})}, {"y", TrtIo::Output, 0, dims({-1, 4}), "x"}};
}

void add_profile(FakeTrtState& s, int64_t lo, int64_t hi) {
  s.profiles.push_back({{"x", {dims({lo, 4}), dims({hi, 4})}}});
}

// One call of `t` rows: shape set, output shape read back, bound, run; y must be x + 1.
Error call(Built& b, float* x, float* y, int32_t t) {
  const int32_t shape[2] = {t, 4};
  if (Error e = b.engine->set_input_shape(0, shape, 2); e != Error::Ok) return e;
  int32_t out[2] = {0, 0};
  if (!b.engine->output_shape(0, out, 2)) return Error::InvalidArgument;
  if (out[0] != t || out[1] != 4) return Error::Internal;
  const size_t n = static_cast<size_t>(t) * 4 * sizeof(float);
  if (Error e = b.engine->bind_input(0, x, n); e != Error::Ok) return e;
  if (Error e = b.engine->bind_output(0, y, n); e != Error::Ok) return e;
  if (Error e = b.engine->run(); e != Error::Ok) return e;
  return b.engine->finish();
}

}  // namespace

TEST(a_dynamic_input_is_shaped_per_call_and_its_output_read_back) {
  FakeTrtState state;
  add_profile(state, 1, 8);
  Built b = build(prefill_blob(), prefill_tensors(), state);
  REQUIRE(b.engine != nullptr);
  float* x = static_cast<float*>(b.engine->allocate_scratch(8 * 4 * 4, b.why).get());
  float* y = static_cast<float*>(b.engine->allocate_scratch(8 * 4 * 4, b.why).get());
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i);
  for (int32_t t : {3, 8, 1}) {
    for (int i = 0; i < 32; ++i) y[i] = -1.0f;
    REQUIRE(call(b, x, y, t) == Error::Ok);
    CHECK_EQ(y[t * 4 - 1], static_cast<float>(t * 4));  // the last row written: x + 1
    CHECK_EQ(y[t * 4 < 32 ? t * 4 : 31], t * 4 < 32 ? -1.0f : 32.0f);  // and nothing past it
  }
  CHECK_EQ(state.enqueues, 3);
  CHECK(state.profiles_set.empty());  // one profile: never switched

  // Beyond the profile: refused at binding, before anything runs, naming shape and bounds.
  tte::clear_refusal();
  CHECK(call(b, x, y, 9) != Error::Ok);
  CHECK_EQ(std::string(tte::last_check()), std::string("execute.shape_profile"));
  CHECK_EQ(std::string(tte::last_refusal()),
           std::string("TensorRTBackend: TensorRT input 'x' has shape [9,4] in this call, "
                       "outside the engine's optimization profiles: profile 0 takes [1,4] to "
                       "[8,4]"));
  CHECK_EQ(state.enqueues, 3);
}

TEST(the_profile_holding_the_calls_shapes_is_selected) {
  FakeTrtState state;
  add_profile(state, 1, 4);
  add_profile(state, 5, 8);
  Built b = build(prefill_blob(), prefill_tensors(), state);
  REQUIRE(b.engine != nullptr);
  float* x = static_cast<float*>(b.engine->allocate_scratch(8 * 4 * 4, b.why).get());
  float* y = static_cast<float*>(b.engine->allocate_scratch(8 * 4 * 4, b.why).get());
  for (int32_t t : {3, 4, 7, 2}) REQUIRE(call(b, x, y, t) == Error::Ok);
  // init starts at the max_shape (profile 1), then 3 -> 0, 4 stays, 7 -> 1, 2 -> 0
  CHECK(state.profiles_set == std::vector<int32_t>({1, 0, 1, 0}));
}

TEST(a_max_shape_no_profile_holds_is_refused_at_init) {
  FakeTrtState state;
  add_profile(state, 2, 6);
  Built b = build(prefill_blob(), prefill_tensors(), state);
  CHECK(b.engine == nullptr);
  CHECK_EQ(std::string(b.why.check), std::string("tensorrt.profile"));
  CHECK_EQ(b.why.text,
           std::string("the blob bounds input binding 'x' at [8,4] (max_shape), which no "
                       "optimization profile of the FakeRT 1.0 engine holds (profile 0: [2,4] to "
                       "[6,4]); rebuild the engine for the exported bounds"));
}

TEST(a_runtime_without_the_sdk_refuses_each_kind_naming_it) {
  BlobInfo info = kv_blob();
  for (auto kind : {tte::EngineKind::TensorRT, tte::EngineKind::TensorRTRTX}) {
    info.engine_kind = kind;
    tte::Reason why;
    auto e = tte::create_engine(info, why);
    const std::string engines = tte::compiled_engines();
    const bool rtx = kind == tte::EngineKind::TensorRTRTX;
    if (engines.find(rtx ? "tensorrt_rtx" : "tensorrt") != std::string::npos) continue;
    CHECK(!e.ok());
    CHECK_EQ(std::string(why.check), std::string("engine.not_compiled"));
    CHECK_EQ(why.text, std::string("TR03 blob holds a ") + (rtx ? "TensorRT-RTX" : "TensorRT") +
                           " engine, but this runtime was built without " +
                           (rtx ? "TensorRT-RTX" : "TensorRT") + " (engines: " + engines +
                           "); rebuild with " +
                           (rtx ? "the TensorRT-RTX SDK (TENSORRT_RTX_ROOT=<its folder> "
                                  "scripts/build_runtime.sh)"
                                : "TensorRT found (TENSORRT_ROOT)") +
                           " or export with the reference engine");
  }
}

TEST(tensorrt_rtx_runs_only_on_the_devices_it_supports) {
  tte::Reason why;
  CHECK(tte::check_rtx_device(0, 8, 9, why) == Error::Ok);
  CHECK(tte::check_rtx_device(0, 12, 0, why) == Error::Ok);
  CHECK(tte::check_rtx_device(1, 9, 0, why) == Error::NotSupported);  // an H200
  CHECK_EQ(why.text,
           std::string("the blob holds a TensorRT-RTX engine, and CUDA device 1 has compute "
                       "capability 9.0, which TensorRT-RTX does not run on (it supports 7.5, "
                       "8.6, 8.9, 12.0, 12.1); run it on an RTX GPU, or export with TensorRT "
                       "(torch-tensorrt) for this device"));
}

TEST(the_engine_names_its_kind) {
  FakeTrtState state;
  BlobInfo info = kv_blob();
  info.engine_kind = tte::EngineKind::TensorRTRTX;
  Built b = build(info, kv_tensors(), state);
  REQUIRE(b.engine != nullptr);
  CHECK_EQ(std::string(b.engine->kind()), std::string("tensorrt_rtx"));
}

// An engine taking a start position as a shape tensor (TensorRT reads it on the host
// when it enqueues): the value is copied out of the caller's tensor — device memory read back
// once per call, host memory copied — and the engine is bound to that host copy; a plain int64
// input stays a device binding; a shape input too large or dynamic is refused at init.
TEST(a_shape_tensor_input_is_bound_to_a_host_copy_of_its_value) {
  BlobInfo info;
  std::memcpy(info.magic, "TR03", 4);
  info.format = 3;
  Binding pos = binding("pos", {}, true, 0), step = binding("step", {1}, true, 1);
  pos.dtype = step.dtype = DType::Int64;
  info.inputs = {pos, step, binding("x", {4}, true, 2)};
  info.outputs = {binding("y", {4}, false, 0)};
  const int32_t kInt64 = tte::trt_type::kInt64;
  FakeTensor host_pos{"pos", TrtIo::Input, kInt64, dims({})};
  host_pos.host = true;
  FakeTrtState state;
  Built b = build(info,
                  {host_pos,
                   {"step", TrtIo::Input, kInt64, dims({1})},
                   {"x", TrtIo::Input, 0, dims({4})},
                   {"y", TrtIo::Output, 0, dims({4}), "x"}},
                  state);
  REQUIRE(b.engine != nullptr);
  auto* on_device = static_cast<int64_t*>(b.engine->allocate_scratch(8, b.why).get());
  auto* step_in = static_cast<int64_t*>(b.engine->allocate_scratch(8, b.why).get());
  float* x = static_cast<float*>(b.engine->allocate_scratch(16, b.why).get());
  float* y = static_cast<float*>(b.engine->allocate_scratch(16, b.why).get());
  for (int64_t p = 3; p <= 5; ++p) {
    *on_device = p;
    REQUIRE(b.engine->bind_input(0, on_device, 8) == Error::Ok);
    REQUIRE(b.engine->bind_input(1, step_in, 8) == Error::Ok);
    REQUIRE(b.engine->bind_input(2, x, 16) == Error::Ok);
    REQUIRE(b.engine->bind_output(0, y, 16) == Error::Ok);
    REQUIRE(b.engine->run() == Error::Ok);
    void* bound = state.addresses["pos"];
    CHECK(bound != on_device && !b.api->is_device_pointer(bound));  // TensorRT reads host memory
    CHECK_EQ(*static_cast<int64_t*>(bound), p);
  }
  CHECK_EQ(state.host_reads, 3);
  CHECK_EQ(state.addresses["step"], static_cast<void*>(step_in));  // not a shape tensor: device
  int64_t on_host = 9;  // a host tensor's value is copied without a device read
  REQUIRE(b.engine->bind_input(0, &on_host, 8) == Error::Ok);
  CHECK_EQ(*static_cast<int64_t*>(state.addresses["pos"]), int64_t(9));
  CHECK_EQ(state.host_reads, 3);
  tte::clear_refusal();
  CHECK(b.engine->bind_input(0, on_device, 4) == Error::InvalidArgument);  // wrong size
  CHECK_EQ(std::string(tte::last_check()), std::string("execute.nbytes"));

  info.inputs[0].shape = {16};  // 128 bytes: more than a shape tensor is bound through
  host_pos.dims = dims({16});
  FakeTrtState big_state;
  Built big = build(info,
                    {host_pos,
                     {"step", TrtIo::Input, kInt64, dims({1})},
                     {"x", TrtIo::Input, 0, dims({4})},
                     {"y", TrtIo::Output, 0, dims({4}), "x"}},
                    big_state);
  CHECK(big.error == Error::NotSupported);
  CHECK_EQ(std::string(big.why.check), std::string("tensorrt.shape_input"));
  CHECK_EQ(big.why.text,
           std::string("TensorRT shape input 'pos' is int64 [16]; this runtime binds shape "
                       "inputs of a static shape up to 64 bytes"));
}

TEST_MAIN()
