// One view per constant segment of a file, however many methods load it.
//
// Invariant: while any buffer `SharedLoads::load` returned for (offset, size) is alive, every
// later load of the same range returns the same bytes at the same address, loaded once through
// the inner loader; the inner buffer is freed when the last of them is. A mapped file's range is
// then one mapping in the process — each method's engine reading the same weights (named data)
// shares it — instead of one mapping per method (ExecuTorch's MmapDataLoader maps per load, and
// resident memory counts each mapping's pages again).
#pragma once

#include "common.h"

#include <executorch/runtime/core/data_loader.h>

#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace tte {

class SharedLoads {
 public:
  using DataLoader = executorch::runtime::DataLoader;
  Result<executorch::runtime::FreeableBuffer> load(const DataLoader& inner, size_t offset,
                                                   size_t size,
                                                   const DataLoader::SegmentInfo& info);

 private:
  struct Entry {
    explicit Entry(executorch::runtime::FreeableBuffer&& b) : buffer(std::move(b)) {}
    SharedLoads* owner = nullptr;
    std::pair<size_t, size_t> range;
    executorch::runtime::FreeableBuffer buffer;
    size_t refs = 0;
  };
  static void release(void* entry, void* data, size_t size);

  std::mutex mutex_;
  std::map<std::pair<size_t, size_t>, std::unique_ptr<Entry>> entries_;
};

}  // namespace tte
