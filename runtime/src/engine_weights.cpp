#include "engine_weights.h"

#include "refusal.h"
#include "sha256.h"

namespace tte {
namespace {

Binding weight_binding(const WeightRef& w, size_t index) {
  Binding b;
  b.name = "weight " + w.key;
  b.dtype = w.dtype;
  b.shape = w.shape;
  b.is_input = true;
  b.index = index;
  return b;
}

}  // namespace

Error EngineWeights::open(const BlobInfo& info, Reason& why) {
  for (size_t k = 0; k < info.weights.size(); ++k) {
    const WeightRef& w = info.weights[k];
    auto data = named_bytes(info, w.key);
    if (!data.ok()) {
      return why.fail(Error::NotFound, "weights.missing",
                      "named data key '" + w.key +
                          "' (a weight of the reference engine) is neither in the .pte nor in "
                          "a data file loaded with it: the .ptd is missing or from another "
                          "program; load the .ptd saved with this .pte");
    }
    if (data->size() != w.nbytes) {
      return why.fail(Error::InvalidExternalData, "weights.size",
                      format("named data key '%s' holds %zu bytes; the weight (%s %s) needs %zu: "
                             "the data file is truncated or from another program",
                             w.key.c_str(), data->size(), dtype_name(w.dtype),
                             shape_text(w.shape).c_str(), w.nbytes));
    }
    data_.push_back(std::move(data.get()));
    keys_.push_back(w.key);
    bindings_.push_back(weight_binding(w, info.inputs.size() + k));
    digests_.emplace_back();
    has_digest_.push_back(named_key_digest(w.key, digests_.back()));
  }
  return Error::Ok;
}

Error EngineWeights::verify() {
  if (verified_) return Error::Ok;
  for (size_t k = 0; k < data_.size(); ++k) {
    if (!has_digest_[k] || sha256(data_[k].data(), data_[k].size()) == digests_[k]) continue;
    refuse("weights.digest",
           "TensorRTBackend: named data '%s' (%zu bytes) does not hash to the SHA-256 its key "
           "names: the data file was altered or damaged; re-export the .pte and its .ptd",
           keys_[k].c_str(), data_[k].size());
    return Error::InvalidExternalData;
  }
  verified_ = true;
  return Error::Ok;
}

}  // namespace tte
