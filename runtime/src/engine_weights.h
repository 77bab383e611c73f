// A reference engine's weights, read from the program's named data (CONTRACTS.md §1 "weights").
//
// Invariant: after `open` every weight the blob lists is a view of the program's named data
// (ExecuTorch's NamedDataMap: the .pte's own segments or a data file loaded with it, mapped, never
// copied here) of exactly the byte size its dtype and shape give, or the engine is refused naming
// the key; `verify` checks each `tte/sha256/<hex>` key against the SHA-256 of its bytes once,
// before the first call reads them, and refuses the call naming the key otherwise — so a truncated,
// altered or foreign data file never reaches a kernel.
#pragma once

#include "blob.h"

#include <executorch/runtime/core/freeable_buffer.h>

#include <array>
#include <string>
#include <vector>

namespace tte {

class EngineWeights {
 public:
  ET_NODISCARD Error open(const BlobInfo& info, Reason& why);
  size_t size() const { return data_.size(); }
  const void* data(size_t k) const { return data_[k].data(); }
  // The weights as input bindings of the payload after the blob's inputs (names say the key).
  const std::vector<Binding>& bindings() const { return bindings_; }
  // Checks every digest once (later calls return at once); refuses naming the key.
  ET_NODISCARD Error verify();

 private:
  std::vector<executorch::runtime::FreeableBuffer> data_;
  std::vector<std::string> keys_;
  std::vector<Binding> bindings_;
  std::vector<std::array<uint8_t, 32>> digests_;
  std::vector<bool> has_digest_;
  bool verified_ = false;
};

}  // namespace tte
