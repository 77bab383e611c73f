// The device-aware DataLoader behind tte::device_aware (tte/device.h).
//
// Invariant: a segment loaded into device memory is read on the host and copied in through the
// device in force — never written by host code; every load of a mutable segment (a buffer's
// initial value) is recorded, so `restore_initial_values` can write each buffer's initial value
// again, the same way, without reading the program anew; a constant segment (named data: engine
// weights) is loaded once however many methods load it (`SharedLoads`).
#pragma once

#include "common.h"
#include "shared_loads.h"

#include <executorch/runtime/core/data_loader.h>

#include <memory>
#include <vector>

namespace tte {

class DeviceAwareLoader final : public executorch::runtime::DataLoader {
 public:
  explicit DeviceAwareLoader(std::unique_ptr<DataLoader> inner) : inner_(std::move(inner)) {}

  Result<executorch::runtime::FreeableBuffer> load(size_t offset, size_t size,
                                                   const SegmentInfo& info) const override;
  Error load_into(size_t offset, size_t size, const SegmentInfo& info, void* buffer) const override;
  Result<size_t> size() const override { return inner_->size(); }

  // Every buffer's initial value, written again where `load_into` first wrote it.
  ET_NODISCARD Error restore_initial_values() const;
  // Forget where they were written (the methods that held them are gone: loaded again).
  void forget_initial_values() const { initial_values_.clear(); }

 private:
  struct Load {
    size_t offset, size;
    SegmentInfo info;
    void* buffer;
  };
  Error copy_in(size_t offset, size_t size, const SegmentInfo& info, void* buffer) const;

  std::unique_ptr<DataLoader> inner_;
  mutable SharedLoads constants_;
  mutable std::vector<Load> initial_values_;  // mutable segments, in load order
};

}  // namespace tte
