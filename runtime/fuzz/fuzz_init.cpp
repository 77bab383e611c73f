// libFuzzer harness: TensorRTBackend::init on whole delegate blobs, payload included (the
// reference engine loads the payload as a nested ExecuTorch program), then one execute on
// zero-filled tensors of the bindings' types when init accepted it.
//
// Invariant checked (besides ASan/UBSan's): init either refuses with a logged reason or returns
// a delegate that executes (Ok or an error) and is destroyed; nothing crashes, hangs or leaks.
// The input is resealed first (TR03 digests recomputed) so mutated payloads reach the program
// loader instead of stopping at the integrity check (fuzz_blob covers that check). A blob's
// "weights" get named data of the size each names (zeros, at most 1 MiB in all), their
// `tte/sha256/<hex>` keys rewritten to those bytes' digest before the reseal, so mutated weights
// reach the engine's checks and its call instead of stopping at a missing key.
#include "../tests/blob_builder.h"
#include "../tests/bytes_data_map.h"
#include "../tests/delegate_args.h"
#include "fuzz_common.h"

#include "blob.h"
#include "refusal.h"
#include "sha256.h"

#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/backend/interface.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using executorch::extension::TensorPtr;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::BackendInterface;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Span;

constexpr size_t kMaxTensorBytes = size_t(16) << 20;  // all delegate tensors of one call

void execute_once(BackendInterface* backend, executorch::runtime::DelegateHandle* handle,
                  const std::string& blob) {
  tte::Reason why;
  auto info = tte::parse_blob(blob.data(), blob.size(), why);
  if (!info.ok()) std::abort();  // init accepted it: the reader must too
  std::vector<std::vector<uint8_t>> storage;
  std::vector<TensorPtr> tensors;
  if (!tte_test::make_delegate_args(info.get(), kMaxTensorBytes, storage, tensors)) return;
  std::vector<EValue> values;
  for (auto& t : tensors) values.emplace_back(*t);
  std::vector<EValue*> args;
  for (auto& v : values) args.push_back(&v);
  BackendExecutionContext ctx;
  (void)backend->execute(ctx, handle, Span<EValue*>(args.data(), args.size()));
}

constexpr size_t kMaxWeightBytes = size_t(1) << 20;

// Each `tte/sha256/<64 hex>` key of a weight the blob names becomes the digest of its zeros.
// Named data for the blob's weights: zeros of each weight's size under its (rewritten) key.
std::string with_zero_weights(std::string blob, tte_test::BytesDataMap& map) {
  tte::Reason why;
  auto info = tte::parse_blob(blob.data(), blob.size(), why);
  if (!info.ok()) return blob;
  size_t total = 0;
  for (const tte::WeightRef& w : info->weights) {
    total += w.nbytes;
    if (total > kMaxWeightBytes) return blob;
  }
  for (const tte::WeightRef& w : info->weights) {
    std::string zeros(w.nbytes, '\0');
    const std::string key = "tte/sha256/" + tte::hex_digest(tte::sha256(zeros.data(), w.nbytes));
    if (w.key.size() == key.size() && w.key.compare(0, 11, "tte/sha256/") == 0) {
      blob = tte_test::replace_all(blob, w.key, key);
      map.data[key] = std::move(zeros);
    } else {
      map.data[w.key] = std::move(zeros);
    }
  }
  return tte_test::reseal(blob);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tte_fuzz::fuzz_init_once();
  static BackendInterface* backend = executorch::runtime::get_backend_class("TensorRTBackend");
  if (backend == nullptr) std::abort();
  tte_test::BytesDataMap weights;
  const std::string blob = with_zero_weights(
      tte_test::reseal(std::string(reinterpret_cast<const char*>(data), size)), weights);
  FreeableBuffer processed(blob.data(), blob.size(), nullptr);
  executorch::extension::MallocMemoryAllocator allocator;
  BackendInitContext ctx(&allocator, nullptr, "forward", &weights);
  tte::clear_refusal();
  auto handle = backend->init(ctx, &processed, {});
  if (!handle.ok()) {
    // every refusal names its reason and check id
    if (tte::last_refusal()[0] == '\0' || tte::last_check()[0] == '\0') std::abort();
    return 0;
  }
  execute_once(backend, handle.get(), blob);
  execute_once(backend, handle.get(), blob);  // a second call after whatever the first did
  backend->destroy(handle.get());
  return 0;
}
