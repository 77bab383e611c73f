// TensorRT plans as named data (shared_plans.h) over the fake SDK (fake_trt.h): engines of one
// program that name one key deserialize it once and each run on its own context; the plan lives
// while an engine holds it; a missing key, another size or altered bytes are refused naming the
// key before anything is deserialized. What the real adapter does with nvinfer1 is compile-checked
// only (scripts/check_tensorrt_headers.sh).
#include "bytes_data_map.h"
#include "check.h"
#include "fake_trt.h"
#include "sha256.h"
#include "tensorrt_engine.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using tte::BlobInfo;
using tte::Error;
using tte::TrtIo;
using tte_test::dims;
using tte_test::FakeTensor;
using tte_test::FakeTrtState;

namespace {

const std::string kPlan = "a serialized plan, as the builder wrote it";

std::string key_of(const std::string& bytes) {
  return std::string(tte::kNamedDataKeyPrefix) +
         tte::hex_digest(tte::sha256(bytes.data(), bytes.size()));
}

// x [n] -> y = x + 1: the plan under `key` in `data` (one program's named data).
BlobInfo keyed_blob(const tte_test::BytesDataMap& data, int64_t n, const std::string& key) {
  BlobInfo info;
  std::memcpy(info.magic, "TR03", 4);
  info.format = 3;
  tte::Binding x, y;
  x.name = "x";
  y.name = "y";
  x.shape = y.shape = {n};
  y.is_input = false;
  info.inputs = {x};
  info.outputs = {y};
  info.delegate_inputs = {"x"};
  info.delegate_outputs = {"y"};
  info.engine_data = {key, kPlan.size()};
  info.named_data = &data;
  return info;
}

std::vector<FakeTensor> tensors(int64_t n) {
  return {{"x", TrtIo::Input, 0, dims({n})}, {"y", TrtIo::Output, 0, dims({n}), "x"}};
}

struct Program {
  tte_test::BytesDataMap data;
  FakeTrtState state;
  int deserialized = 0;
  int destroyed = 0;
  Program() { data.data[key_of(kPlan)] = kPlan; }
  // An engine over the fake SDK for `info`, or nullptr with `why` set.
  std::unique_ptr<tte::Engine> engine(const BlobInfo& info, tte::Reason& why) {
    auto api = tte_test::open_fake_sdk(info, tensors(info.inputs[0].shape[0]), state, deserialized,
                                       destroyed, why);
    if (!api.ok()) return nullptr;
    auto e = tte::create_tensorrt_engine_over(std::move(api.get()), info, why);
    return e.ok() ? std::move(e.get()) : nullptr;
  }
};

// One call of `e` on x = 0, 1, ...: y[n-1] (x + 1 through the engine's own binding); -1 when a
// step fails.
float run_once(tte::Engine& e, int64_t n) {
  tte::Reason why;
  auto* x = static_cast<float*>(e.allocate_scratch(4 * n, why).get());
  auto* y = static_cast<float*>(e.allocate_scratch(4 * n, why).get());
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  const bool ok = e.bind_input(0, x, 4 * n) == Error::Ok &&
                  e.bind_output(0, y, 4 * n) == Error::Ok && e.run() == Error::Ok &&
                  e.finish() == Error::Ok;
  return ok ? y[n - 1] : -1.0f;
}

}  // namespace

TEST(two_methods_naming_one_plan_deserialize_it_once_and_run_each_on_its_own_context) {
  Program p;
  tte::Reason why;
  auto prefill = p.engine(keyed_blob(p.data, 8, key_of(kPlan)), why);
  auto decode = p.engine(keyed_blob(p.data, 8, key_of(kPlan)), why);
  REQUIRE(prefill != nullptr && decode != nullptr);
  CHECK_EQ(p.deserialized, 1);
  CHECK_EQ(p.data.lookups, 1);  // the second engine did not read the bytes again
  CHECK_EQ(run_once(*prefill, 8), 8.0f);
  CHECK_EQ(run_once(*decode, 8), 8.0f);
  CHECK_EQ(p.state.enqueues, 2);
  prefill.reset();
  CHECK_EQ(p.destroyed, 0);  // decode still holds it
  decode.reset();
  CHECK_EQ(p.destroyed, 1);  // the last holder's release destroys it
  auto again = p.engine(keyed_blob(p.data, 8, key_of(kPlan)), why);
  REQUIRE(again != nullptr);
  CHECK_EQ(p.deserialized, 2);  // nothing held it: deserialized anew, checked anew
}

TEST(two_programs_with_the_same_key_each_deserialize_their_own) {
  Program a, b;
  tte::Reason why;
  auto ea = a.engine(keyed_blob(a.data, 4, key_of(kPlan)), why);
  auto eb = b.engine(keyed_blob(b.data, 4, key_of(kPlan)), why);
  REQUIRE(ea != nullptr && eb != nullptr);
  CHECK_EQ(a.deserialized + b.deserialized, 2);
}

TEST(one_key_on_two_devices_is_deserialized_once_per_device) {
  Program p;
  tte::Reason why;
  BlobInfo on1 = keyed_blob(p.data, 4, key_of(kPlan));
  on1.device_id = 1;
  auto e0 = p.engine(keyed_blob(p.data, 4, key_of(kPlan)), why);
  auto e1 = p.engine(on1, why);
  auto e1b = p.engine(on1, why);
  REQUIRE(e0 != nullptr && e1 != nullptr && e1b != nullptr);
  CHECK_EQ(p.deserialized, 2);
}

TEST(a_plan_the_sdk_refuses_is_not_kept_and_refused_again) {
  tte_test::BytesDataMap data;
  data.data[key_of(kPlan)] = kPlan;
  const BlobInfo info = keyed_blob(data, 4, key_of(kPlan));
  int calls = 0;
  const tte::Deserialize refuse = [&](const void*, size_t n, tte::Reason& w) {
    ++calls;
    return tte::Result<tte::PlanHandle>(
        w.fail(Error::DelegateInvalidCompatibility, "tensorrt.deserialize",
               "could not deserialize the " + std::to_string(n) + "-byte engine"));
  };
  for (int i = 0; i < 2; ++i) {
    tte::Reason why;
    CHECK(tte::shared_plan(info, refuse, why).error() == Error::DelegateInvalidCompatibility);
    CHECK_EQ(std::string(why.check), std::string("tensorrt.deserialize"));
  }
  CHECK_EQ(calls, 2);
}

TEST(a_plan_in_the_payload_is_deserialized_per_engine) {
  Program p;
  tte::Reason why;
  BlobInfo info = keyed_blob(p.data, 4, "");
  info.engine_data = {};
  info.engine = reinterpret_cast<const uint8_t*>(kPlan.data());
  info.engine_size = kPlan.size();
  auto e1 = p.engine(info, why);
  auto e2 = p.engine(info, why);
  REQUIRE(e1 != nullptr && e2 != nullptr);
  CHECK_EQ(p.deserialized, 2);
  CHECK_EQ(p.data.lookups, 0);
}

TEST(a_missing_key_is_refused_naming_it) {
  Program p;
  p.data.data.clear();
  tte::Reason why;
  const std::string key = key_of(kPlan);
  CHECK(p.engine(keyed_blob(p.data, 4, key), why) == nullptr);
  CHECK_EQ(std::string(why.check), std::string("engine_data.missing"));
  CHECK_EQ(why.text, "named data key '" + key +
                         "' (the engine's plan) is neither in the .pte nor in a data file loaded "
                         "with it: the .ptd is missing or from another program; load the .ptd "
                         "saved with this .pte");
  CHECK_EQ(p.deserialized, 0);
}

TEST(a_truncated_plan_is_refused_naming_the_key_and_both_sizes) {
  Program p;
  const std::string key = key_of(kPlan);
  p.data.data[key] = kPlan.substr(0, 10);
  tte::Reason why;
  CHECK(p.engine(keyed_blob(p.data, 4, key), why) == nullptr);
  CHECK_EQ(std::string(why.check), std::string("engine_data.size"));
  CHECK_EQ(why.text, "named data key '" + key + "' holds 10 bytes; the engine's plan is " +
                         std::to_string(kPlan.size()) +
                         ": the data file is truncated or from another program");
  CHECK_EQ(p.deserialized, 0);
}

TEST(an_altered_plan_is_refused_before_it_is_deserialized) {
  Program p;
  const std::string key = key_of(kPlan);
  p.data.data[key][3] ^= 1;  // same size, one bit off
  tte::Reason why;
  CHECK(p.engine(keyed_blob(p.data, 4, key), why) == nullptr);
  CHECK_EQ(std::string(why.check), std::string("engine_data.digest"));
  CHECK_EQ(why.text, "named data '" + key + "' (" + std::to_string(kPlan.size()) +
                         " bytes, the engine's plan) does not hash to the SHA-256 its key names: "
                         "the data file was altered or damaged; re-export the .pte and its .ptd");
  CHECK_EQ(p.deserialized, 0);
  // Nothing was cached: the intact bytes are accepted next time.
  p.data.data[key] = kPlan;
  CHECK(p.engine(keyed_blob(p.data, 4, key), why) != nullptr);
  CHECK_EQ(p.deserialized, 1);
}

// The first asker of key A is inside its deserialize (holding A) when B is asked for: B's
// deserialize runs meanwhile — A's waits up to 10 s to see it start, which one lock over every key
// would never let happen — and a second asker of A waits for A's engine rather than making its own.
TEST(plans_under_two_keys_deserialize_at_once_and_one_key_waits_for_its_first_asker) {
  const std::string plan_b = kPlan + ", another one";
  tte_test::BytesDataMap data;
  data.data[key_of(kPlan)] = kPlan;
  data.data[key_of(plan_b)] = plan_b;
  BlobInfo a = keyed_blob(data, 4, key_of(kPlan));
  BlobInfo b = keyed_blob(data, 4, key_of(plan_b));
  b.engine_data.nbytes = plan_b.size();
  std::mutex m;
  std::condition_variable cv;
  bool a_inside = false, b_started = false, a_saw_b = false;
  std::atomic<int> deserialized{0};
  tte::Deserialize deserialize = [&](const void*, size_t n, tte::Reason&) {
    ++deserialized;
    std::unique_lock<std::mutex> lock(m);
    if (n == kPlan.size()) {
      a_inside = true;
      cv.notify_all();
      a_saw_b = cv.wait_for(lock, std::chrono::seconds(10), [&] { return b_started; });
    } else {
      b_started = true;
      cv.notify_all();
    }
    return tte::Result<tte::PlanHandle>(tte::PlanHandle(std::make_shared<int>(0)));
  };
  tte::PlanHandle first_a, second_a, got_b;
  std::thread asker_a([&] {
    tte::Reason why;
    auto r = tte::shared_plan(a, deserialize, why);
    if (r.ok()) first_a = r.get();
  });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return a_inside; });
  }
  std::thread again_a([&] {
    tte::Reason why;
    auto r = tte::shared_plan(a, deserialize, why);
    if (r.ok()) second_a = r.get();
  });
  tte::Reason why;
  auto r = tte::shared_plan(b, deserialize, why);
  if (r.ok()) got_b = r.get();
  asker_a.join();
  again_a.join();
  CHECK(a_saw_b);
  REQUIRE(first_a != nullptr && second_a != nullptr && got_b != nullptr);
  CHECK(first_a == second_a);  // one engine for key A
  CHECK(first_a != got_b);
  CHECK_EQ(deserialized.load(), 2);
}

TEST_MAIN()
