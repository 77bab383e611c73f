// A reference engine's weights from the program's named data (CONTRACTS.md §2 "Weights"), on a
// named data map of the test's own: every key the blob lists is taken in place (no copy), a key
// missing or of another byte size refused at open naming it, each digest checked once, before
// the first call, and an altered byte refused naming the key.
#include "bytes_data_map.h"
#include "check.h"

#include "engine_weights.h"
#include "refusal.h"
#include "sha256.h"
#include "shared_loads.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

using executorch::runtime::Error;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Result;

namespace {

std::string key_of(const std::string& bytes) {
  return "tte/sha256/" + tte::hex_digest(tte::sha256(bytes.data(), bytes.size()));
}

tte::WeightRef weight(const std::string& key, int64_t n) {
  tte::WeightRef w;
  w.key = key;
  w.dtype = tte::DType::Float32;
  w.shape = {n};
  w.nbytes = static_cast<size_t>(n) * 4;
  return w;
}

struct Fixture {
  tte_test::BytesDataMap map;
  tte::BlobInfo info;
  Fixture() {
    const std::string a(64, 'a'), b(32, 'b');
    map.data = {{key_of(a), a}, {key_of(b), b}};
    info.inputs.resize(2);
    info.weights = {weight(key_of(a), 16), weight(key_of(b), 8), weight(key_of(a), 16)};
    info.named_data = &map;
  }
};

}  // namespace

TEST(weights_are_the_named_data_in_place_as_trailing_inputs) {
  Fixture f;
  tte::EngineWeights w;
  tte::Reason why;
  CHECK(w.open(f.info, why) == Error::Ok);
  CHECK_EQ(w.size(), size_t(3));
  CHECK(w.data(0) == f.map.data.at(f.info.weights[0].key).data());  // not a copy
  CHECK(w.data(2) == w.data(0));                                    // one key, one place
  CHECK_EQ(w.bindings()[1].index, size_t(3));  // after the blob's two input bindings
  CHECK_EQ(w.bindings()[1].name, "weight " + f.info.weights[1].key);
  CHECK(w.verify() == Error::Ok);
}

TEST(a_missing_key_is_refused_naming_it) {
  Fixture f;
  f.map.data.erase(f.info.weights[1].key);
  tte::EngineWeights w;
  tte::Reason why;
  CHECK(w.open(f.info, why) == Error::NotFound);
  CHECK_EQ(std::string(why.check), "weights.missing");
  CHECK(why.text.find("named data key '" + f.info.weights[1].key + "'") != std::string::npos);
  f.info.named_data = nullptr;  // a program loaded with no named data at all: the same refusal
  tte::EngineWeights none;
  CHECK(none.open(f.info, why) == Error::NotFound);
  CHECK_EQ(std::string(why.check), "weights.missing");
}

TEST(a_key_of_another_size_is_refused_naming_both_sizes) {
  Fixture f;
  f.map.data[f.info.weights[1].key] = std::string(31, 'b');  // truncated by one byte
  tte::EngineWeights w;
  tte::Reason why;
  CHECK(w.open(f.info, why) == Error::InvalidExternalData);
  CHECK_EQ(std::string(why.check), "weights.size");
  CHECK(why.text.find("holds 31 bytes; the weight (float32 [8]) needs 32") != std::string::npos);
}

TEST(an_altered_byte_is_refused_before_the_first_call_and_checked_once) {
  Fixture f;
  tte::EngineWeights w;
  tte::Reason why;
  CHECK(w.open(f.info, why) == Error::Ok);
  f.map.data[f.info.weights[1].key][5] ^= 0x01;  // altered after the load, in place
  tte::clear_refusal();
  CHECK(w.verify() == Error::InvalidExternalData);
  CHECK_EQ(std::string(tte::last_check()), "weights.digest");
  CHECK(std::string(tte::last_refusal()).find(f.info.weights[1].key) != std::string::npos);
  f.map.data[f.info.weights[1].key][5] ^= 0x01;
  CHECK(w.verify() == Error::Ok);
  f.map.data[f.info.weights[1].key][5] ^= 0x01;  // verified once: not hashed per call
  CHECK(w.verify() == Error::Ok);
}

// A loader that hands out a fresh copy per load, as a per-load mapping would, and counts.
class CopyingLoader final : public executorch::runtime::DataLoader {
 public:
  std::string bytes = std::string(4096, 'w');
  mutable int loads = 0, frees = 0;
  mutable std::vector<std::unique_ptr<std::string>> copies;  // freed with the loader
  Result<FreeableBuffer> load(size_t offset, size_t size, const SegmentInfo&) const override {
    ++loads;
    copies.push_back(std::make_unique<std::string>(bytes.substr(offset, size)));
    return FreeableBuffer(
        copies.back()->data(), size,
        [](void* ctx, void*, size_t) {
          auto* self = static_cast<const CopyingLoader*>(ctx);
          ++self->frees;
        },
        const_cast<CopyingLoader*>(this));
  }
  Result<size_t> size() const override { return bytes.size(); }
};

TEST(two_methods_loading_one_weight_share_one_load_freed_after_the_last) {
  CopyingLoader inner;
  tte::SharedLoads shared;
  const executorch::runtime::DataLoader::SegmentInfo info(
      executorch::runtime::DataLoader::SegmentInfo::Type::Constant);
  auto a = shared.load(inner, 64, 128, info);
  auto b = shared.load(inner, 64, 128, info);  // a second method's engine, the same weight
  auto c = shared.load(inner, 0, 128, info);   // another range: its own load
  CHECK(a.ok() && b.ok() && c.ok());
  CHECK(a->data() == b->data());
  CHECK(a->data() != c->data());
  CHECK_EQ(inner.loads, 2);
  a->Free();
  CHECK_EQ(inner.frees, 0);  // still read by the other
  b->Free();
  CHECK_EQ(inner.frees, 1);
  auto again = shared.load(inner, 64, 128, info);  // after the last went: loaded anew
  CHECK_EQ(inner.loads, 3);
  again->Free();
  c->Free();
  CHECK_EQ(inner.frees, 3);
}

int main() { return tte_test::run_all(); }
