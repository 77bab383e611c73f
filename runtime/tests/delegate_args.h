// Zero-filled delegate arguments for any blob (the fuzz harness and the regression tests run
// delegates they know nothing about).
//
// Invariant: `make_delegate_args` returns false (and makes nothing usable) when a delegate
// input/output binding is unknown or the tensors would exceed `max_bytes` in all; otherwise
// `tensors` holds one contiguous tensor per delegate input, then per delegate output, of the
// binding's dtype and shape (a dynamic dimension is 1), backed by `storage`.
#pragma once

#include "blob.h"

#include <executorch/extension/tensor/tensor_ptr.h>

#include <cstdint>
#include <vector>

namespace tte_test {

inline bool make_delegate_args(const tte::BlobInfo& info, size_t max_bytes,
                               std::vector<std::vector<uint8_t>>& storage,
                               std::vector<executorch::extension::TensorPtr>& tensors) {
  size_t total = 0;
  storage.reserve(info.delegate_inputs.size() + info.delegate_outputs.size());
  auto add = [&](const tte::Binding* b) {
    if (b == nullptr || !b->known) return false;
    std::vector<executorch::aten::SizesType> sizes;
    size_t n = tte::dtype_size(b->dtype);
    for (int64_t s : b->shape) {
      const int64_t d = s < 0 ? 1 : s;
      if (d > (int64_t(1) << 24) || (d && n > max_bytes / size_t(d))) return false;
      n *= size_t(d);
      sizes.push_back(static_cast<executorch::aten::SizesType>(d));
    }
    total += n;
    if (total > max_bytes) return false;
    storage.emplace_back(n ? n : 1, 0);
    tensors.push_back(executorch::extension::make_tensor_ptr(sizes, storage.back().data(),
                                                             tte::dtype_scalar_type(b->dtype)));
    return true;
  };
  for (const auto& name : info.delegate_inputs) {
    if (!add(info.input(name))) return false;
  }
  for (const auto& name : info.delegate_outputs) {
    if (!add(info.output(name))) return false;
  }
  return true;
}

}  // namespace tte_test
