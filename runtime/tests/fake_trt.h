// A TrtApi (trt_api.h) in host memory, for unit-testing the TensorRT engine's own logic where no
// TensorRT can run: tensors are declared by name; "device memory" is what `allocate` handed out
// (or `adopt` registered), and nothing else is; `enqueue` computes each output as its source
// input + 1 (float32), through the input's own address when the output aliases it — as an
// IKVCacheUpdateLayer writes the cache in place. A dynamic (-1) input takes the shapes its
// optimization profiles hold (FakeTrtState::profiles); an output's -1 dims are its source's.
//
// Invariant: the fake answers exactly what it was declared with and records what the engine
// asked of it (the weight streaming budget and whether a context existed then, addresses bound),
// so tests assert what the engine did, not only what it returned.
#pragma once

#include "shared_plans.h"
#include "trt_api.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tte_test {

struct FakeTensor {
  std::string name;
  tte::TrtIo io = tte::TrtIo::Input;
  int32_t dtype = 0;  // nvinfer1::DataType::kFLOAT
  tte::TrtDims dims{};
  std::string from;   // an output: the input it is computed from
  std::string alias;  // an output: the input the engine says it aliases ("" none)
  bool linear = true;
  bool host = false;  // an input: a shape tensor TensorRT reads on the host
};

inline tte::TrtDims dims(std::initializer_list<int64_t> d) {
  tte::TrtDims t;
  t.nb = static_cast<int32_t>(d.size());
  int i = 0;
  for (int64_t v : d) t.d[i++] = v;
  return t;
}

struct FakeTrtState {  // outlives the engine that owns the FakeTrt
  // Optimization profiles: per profile, input name -> (min, max). The context's profile and every
  // set_profile call (a test asserts which profile each call ran with).
  std::vector<std::map<std::string, std::pair<tte::TrtDims, tte::TrtDims>>> profiles;
  int32_t profile = 0;
  std::vector<int32_t> profiles_set;
  bool alias_known = true;
  int64_t streamable = 0;
  bool accept_budget = true;
  int64_t budget = -1;
  bool context_when_budget_set = false;
  bool context = false;
  int enqueues = 0;
  int host_reads = 0;  // read_to_host calls (a host input's value fetched from device memory)
  std::map<std::string, void*> addresses;
};

class FakeTrt final : public tte::TrtApi {
 public:
  FakeTrt(std::vector<FakeTensor> tensors, FakeTrtState& state)
      : tensors_(std::move(tensors)), state_(state) {}
  ~FakeTrt() override {
    for (void* p : owned_) std::free(p);
  }

  // The deserialized plan this engine holds (shared_plans.h), as the SDK's adapter holds its own.
  tte::PlanHandle plan;

  // Registers host memory the test allocated as "device memory".
  void adopt(void* p) { device_.insert(p); }

  const char* sdk() const override { return "FakeRT 1.0"; }
  int32_t io_count() const override { return static_cast<int32_t>(tensors_.size()); }
  tte::TrtIo io_mode(const char* name) const override {
    const FakeTensor* t = find(name);
    return t ? t->io : tte::TrtIo::None;
  }
  int32_t data_type(const char* name) const override { return find(name)->dtype; }
  bool linear(const char* name) const override { return find(name)->linear; }
  bool host_input(const char* name) const override {
    const FakeTensor* t = find(name);
    return t != nullptr && t->host;
  }
  tte::TrtDims engine_shape(const char* name) const override {
    const FakeTensor* t = find(name);
    return t ? t->dims : tte::TrtDims{};
  }
  tte::TrtAlias aliased_input(const char* output) const override {
    if (!state_.alias_known) return {};
    const FakeTensor* t = find(output);
    return {true, t && !t->alias.empty() ? t->alias.c_str() : nullptr};
  }
  int64_t streamable_weights() const override { return state_.streamable; }
  bool set_weight_streaming_budget(int64_t bytes) override {
    state_.context_when_budget_set = state_.context;
    if (!state_.accept_budget) return false;
    state_.budget = bytes;
    return true;
  }
  bool create_context() override { return state_.context = true; }
  int32_t profile_count() const override { return static_cast<int32_t>(state_.profiles.size()); }
  bool profile_bounds(const char* name, int32_t profile, tte::TrtDims& min,
                      tte::TrtDims& max) const override {
    if (profile < 0 || profile >= profile_count()) return false;
    const auto& p = state_.profiles[static_cast<size_t>(profile)];
    const auto it = p.find(name);
    if (it == p.end()) return false;
    min = it->second.first;
    max = it->second.second;
    return true;
  }
  bool set_profile(int32_t profile) override {
    if (profile < 0 || profile >= profile_count()) return false;
    state_.profile = profile;
    state_.profiles_set.push_back(profile);
    return true;
  }
  // As TensorRT: the rank and static dims must match, a dynamic one lie in the context's profile.
  bool set_input_shape(const char* name, const tte::TrtDims& d) override {
    FakeTensor* t = find(name);
    if (!t || d.nb != t->dims.nb) return false;
    bool dynamic = false;
    for (int32_t k = 0; k < d.nb; ++k) {
      if (t->dims.d[k] >= 0 && t->dims.d[k] != d.d[k]) return false;
      dynamic = dynamic || t->dims.d[k] < 0;
    }
    if (dynamic) {
      tte::TrtDims lo, hi;
      if (!profile_bounds(name, state_.profile, lo, hi)) return false;
      for (int32_t k = 0; k < d.nb; ++k) {
        if (d.d[k] < lo.d[k] || d.d[k] > hi.d[k]) return false;
      }
    }
    context_[name] = d;
    return true;
  }
  // An input's shape as set; an output's dynamic dims are its source input's (same positions).
  tte::TrtDims context_shape(const char* name) const override {
    const FakeTensor* t = find(name);
    if (t == nullptr) return tte::TrtDims{};
    const auto set = context_.find(t->io == tte::TrtIo::Input ? t->name : t->from);
    if (set == context_.end()) return t->dims;
    if (t->io == tte::TrtIo::Input) return set->second;
    tte::TrtDims d = t->dims;
    for (int32_t k = 0; k < d.nb && k < set->second.nb; ++k) {
      if (d.d[k] < 0) d.d[k] = set->second.d[k];
    }
    return d;
  }
  bool set_address(const char* name, void* data) override {
    state_.addresses[name] = data;
    return true;
  }
  bool enqueue() override {
    ++state_.enqueues;
    for (const FakeTensor& t : tensors_) {
      if (t.io != tte::TrtIo::Output || t.from.empty()) continue;
      const float* in = static_cast<const float*>(state_.addresses[t.from]);
      float* out = static_cast<float*>(state_.addresses[t.alias.empty() ? t.name : t.alias]);
      const tte::TrtDims d = context_shape(t.name.c_str());
      size_t n = 1;
      for (int32_t k = 0; k < d.nb; ++k) n *= static_cast<size_t>(d.d[k]);
      for (size_t i = 0; i < n; ++i) out[i] = in[i] + 1.0f;
    }
    return true;
  }
  tte::Result<void*> allocate(size_t nbytes) override {
    void* p = std::calloc(1, nbytes ? nbytes : 1);
    owned_.push_back(p);
    device_.insert(p);
    return p;
  }
  bool copy_async(void* dst, const void* src, size_t nbytes) override {
    std::memcpy(dst, src, nbytes);
    return true;
  }
  bool read_to_host(void* dst, const void* src, size_t nbytes) override {
    ++state_.host_reads;
    std::memcpy(dst, src, nbytes);
    return true;
  }
  bool synchronize() override { return true; }
  bool is_device_pointer(const void* p) const override { return device_.count(p) != 0; }
  const char* last_error() const override { return "fake error"; }

 private:
  FakeTensor* find(const char* name) {
    for (FakeTensor& t : tensors_) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  const FakeTensor* find(const char* name) const { return const_cast<FakeTrt*>(this)->find(name); }

  std::vector<FakeTensor> tensors_;
  std::map<std::string, tte::TrtDims> context_;  // input shapes set on the context
  FakeTrtState& state_;
  std::vector<void*> owned_;
  std::set<const void*> device_;
};

}  // namespace tte_test

namespace tte_test {

// What the fake "deserializes" a plan to: its bytes, and a count of its destructions.
struct FakePlan {
  std::string bytes;
  int* destroyed = nullptr;
  ~FakePlan() {
    if (destroyed) ++*destroyed;
  }
};

// The fake SDK's open_tensorrt_sdk: the blob's plan through tte::shared_plan (counting what it
// deserializes into `deserialized`), a FakeTrt over it holding it.
inline tte::Result<std::unique_ptr<FakeTrt>> open_fake_sdk(const tte::BlobInfo& info,
                                                           std::vector<FakeTensor> tensors,
                                                           FakeTrtState& state, int& deserialized,
                                                           int& destroyed, tte::Reason& why) {
  auto plan = tte::shared_plan(
      info,
      [&](const void* bytes, size_t n, tte::Reason&) -> tte::Result<tte::PlanHandle> {
        ++deserialized;
        auto p = std::make_shared<FakePlan>();
        p->bytes.assign(static_cast<const char*>(bytes), n);
        p->destroyed = &destroyed;
        return tte::PlanHandle(std::move(p));
      },
      why);
  if (!plan.ok()) return plan.error();
  auto api = std::make_unique<FakeTrt>(std::move(tensors), state);
  api->plan = plan.get();
  return api;
}

}  // namespace tte_test
