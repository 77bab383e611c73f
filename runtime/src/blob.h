// The delegate blob (CONTRACTS.md §1): 32-byte header `<4sIIIQ8s>` (TR03: 64 bytes, the last 32
// the metadata's SHA-256), JSON metadata, engine.
//
// Invariant: a `BlobInfo` returned by `parse_blob` is fully validated — check for check what
// python's `torch_tensorrt_ext.contracts.blob.parse` checks, in the same order, each refusal
// carrying the same check id (CONTRACTS.md §1 "Check ids"; tests/test_blob_differential.py
// compares the two): offsets inside the blob, TR03 integrity (the metadata's and the payload's
// SHA-256 match the recorded digests), strict JSON (blob_json.h), typed metadata, bindings of at
// most 2**63-1 bytes, unique binding names, every referenced name an existing binding of the
// right direction, aliased and copy-back pairs of equal dtype and shape, every output binding a
// delegate output, aliased or copy-back. TR01/TR02 are given upstream's meaning (TensorRT
// engine, all inputs/outputs are delegate args in binding order). A magic other than
// TR01/TR02/TR03, or a TR03 `tte_version` outside 3..5, fails with
// Error::DelegateInvalidCompatibility; every other defect with Error::InvalidProgram (an
// allocation failure with Error::MemoryAllocationFailed: nothing here throws).
// A TR01/TR02 binding with dtype "" and shape [] (what upstream's preprocess writes) is unknown
// (`Binding::known` false): the executor fills it in from the engine at init
// (resolve_unknown_bindings), else its dtype, shape and byte size are the delegate tensor's at
// execute and an aliased pair with an unknown side is compared there, not here; a TR03 blob must
// give every binding's dtype and shape. A known binding's -1 dimension is sized by its delegate
// tensor at execute (CONTRACTS.md §1).
// `engine` points into the parsed bytes: the caller keeps them alive as long as it uses it.
#pragma once

#include "common.h"
#include "dtype.h"
#include "sha256.h"

#include <executorch/runtime/core/named_data_map.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tte {

constexpr size_t kBlobHeaderSize = 32;
constexpr uint32_t kEngineAlignment = 16;
// The TR03 metadata version written (4: "weights", 5: "engine_data"); readers take 3 to 5.
constexpr int kTteVersion = 5;
constexpr int kTteOldestVersion = 3;
// The named-data key of bytes (a weight, a plan): this prefix and the hex of their SHA-256.
constexpr const char* kNamedDataKeyPrefix = "tte/sha256/";

// The SHA-256 a `tte/sha256/<64 lowercase hex>` named-data key names; false for any other key.
inline bool named_key_digest(const std::string& key, Digest& out) {
  const std::string prefix = kNamedDataKeyPrefix;
  return key.compare(0, prefix.size(), prefix) == 0 &&
         digest_from_hex(key.substr(prefix.size()), out);
}
// A TR03 header is the 32-byte upstream header followed by the SHA-256 of the metadata.
constexpr size_t kTr03HeaderSize = 64;
// The largest binding either reader accepts: 2^63-1 bytes (its static dims times the element
// size; python's ints do not overflow, so both readers refuse beyond this explicitly).
constexpr uint64_t kMaxBindingBytes = (uint64_t(1) << 63) - 1;

enum class EngineKind : uint8_t { TensorRT, Reference, TensorRTRTX };

struct Binding {
  std::string name;
  DType dtype = DType::Float32;  // meaningless when !known
  std::vector<int64_t> shape;    // -1: dynamic dimension
  // TR03 max_shape: each dim's upper bound (static dims as they are), the memory the delegate
  // tensor is planned for; empty when the blob gives none.
  std::vector<int64_t> max_shape;
  bool is_input = true;
  bool known = true;       // false: dtype "" and shape [] (TR01/TR02), the tensor's at execute
  size_t index = 0;        // position among the inputs (or among the outputs)
  size_t position = 0;     // position in io_bindings (document order, for validation order)
  bool is_static() const;  // false when dynamic or unknown
  size_t numel() const;    // 0 when dynamic or unknown; SIZE_MAX when !fits()
  size_t nbytes() const;   // 0 when dynamic or unknown: then the delegate tensor's
  // Bytes at max_shape (nbytes() when static; 0 when dynamic without one; SIZE_MAX past
  // kMaxBindingBytes).
  size_t max_nbytes() const;
  // Dynamic and bounded by a max_shape: shaped per call (the one test every reader asks).
  bool bounded_dynamic() const;
  // Its static dimensions times its element size are at most kMaxBindingBytes (validate_blob
  // refuses a binding that does not fit, so numel/nbytes of a validated one never saturate).
  bool fits() const;
  std::string describe() const;  // "float32 [1,2,8,4]", or "unknown"
};

struct AliasedIO {
  std::string output, input, kind;
};
struct BufferRef {
  std::string input, fqn;
};
struct CopyBackRef {
  std::string output, input;
};

// Version 4 "weights": a reference engine's weight kept out of its payload, the program's named
// data under `key`, bound as the payload's next input after the input bindings.
struct WeightRef {
  std::string key;
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
  size_t nbytes = 0;
};

// Version 5 "engine_data": a TensorRT / TensorRT-RTX plan kept out of the payload (which is
// empty), the program's named data under `key` (`tte/sha256/<hex>`: the plan's SHA-256), `nbytes`.
struct EngineDataRef {
  std::string key;
  uint64_t nbytes = 0;
};

struct BlobInfo {
  char magic[5] = {0, 0, 0, 0, 0};
  int format = 0;                // 1, 2 or 3 (the digit of the magic)
  std::vector<Binding> inputs;   // input bindings in binding order
  std::vector<Binding> outputs;  // output bindings in binding order
  std::vector<AliasedIO> aliased_io;
  EngineKind engine_kind = EngineKind::TensorRT;
  std::vector<std::string> delegate_inputs;   // delegate arg i -> input binding name
  std::vector<std::string> delegate_outputs;  // delegate output j -> output binding name
  std::vector<BufferRef> buffers;
  std::vector<CopyBackRef> copy_back;
  bool hardware_compatible = false;
  int64_t device_id = 0;
  std::string serialized_metadata;
  std::string target_platform;
  const uint8_t* engine = nullptr;
  uint64_t engine_size = 0;
  std::string engine_sha256;  // TR03: 64 lowercase hex digits, checked against `engine`
  // TR03 "weight_streaming_budget": bytes of engine weights that may stay resident on the device
  // (torch_tensorrt.save's weight_streaming_budget_per_engine); -1 when the blob sets none.
  int64_t weight_streaming_budget = -1;
  std::vector<WeightRef> weights;  // version 4, reference engines only
  EngineDataRef engine_data;       // version 5, TensorRT kinds only; key "" when the payload is it
  // Not in the blob: the delegate's `target_device` compile spec ("cuda:0"), "" when it has none
  // (a host delegate). A reference engine runs "on the device" only for a device delegate.
  std::string target_device;
  // Not in the blob: the program's named data (ExecuTorch's, from the delegate's init context:
  // the .pte's own and any data files loaded with it), where a reference engine's weights are;
  // nullptr when the program has none.
  const executorch::runtime::NamedDataMap* named_data = nullptr;

  const Binding* input(const std::string& name) const;
  const Binding* output(const std::string& name) const;
  // The FQN of the buffer bound to input binding `input`, or nullptr.
  const std::string* buffer_fqn(const std::string& input) const;
};

// The bytes under `key` in the program's named data (NotFound without a named data map).
inline executorch::runtime::Result<executorch::runtime::FreeableBuffer> named_bytes(
    const BlobInfo& info, const std::string& key) {
  if (info.named_data == nullptr) return executorch::runtime::Error::NotFound;
  return info.named_data->get_data(key.c_str());
}

// Never throws (an allocation failure is refused with Error::MemoryAllocationFailed).
Result<BlobInfo> parse_blob(const void* data, size_t size, Reason& why);

// The cross-reference checks of parse_blob on an already-read BlobInfo (also usable on a
// hand-built one): false with `why` set on the first inconsistency.
bool validate_blob(const BlobInfo& info, Reason& why);

// Reads the metadata JSON of a blob whose header was read (`info.magic`/`format` set) into
// `info`: Error::Ok, Error::DelegateInvalidCompatibility (a TR03 tte_version other than 3) or
// Error::InvalidProgram, with `why` set. Not yet validated (blob_metadata.cpp).
ET_NODISCARD Error read_metadata(const char* text, size_t size, BlobInfo& info, Reason& why);

// "[1,2,8,4]": the runtime's one shape printer (the executor's hot path has an allocation-free
// one, dims_text), for any sequence of integer sizes (a binding's shape, a tensor's sizes).
template <class Sizes>
std::string shape_text(const Sizes& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(static_cast<int64_t>(shape[i]));
  }
  return s + "]";
}

// The tail of both readers' refusal of an unknown binding in a TR03 blob.
extern const char* const kUnknownInTr03;

}  // namespace tte
