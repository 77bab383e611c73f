// TensorRT / TensorRT-RTX plans as the program's named data (CONTRACTS.md §1 "engine_data"),
// deserialized once per key.
//
// Invariant: `shared_plan` returns the deserialized plan a blob names. A blob whose payload is the
// plan (TR01/TR02, TR03 without engine_data) gets its own. A blob with engine_data gets the one
// deserialized engine of (its program's named data map, key, device) while any engine holds it:
// the first asker takes the key's bytes from the named data (absent: `engine_data.missing`;
// another byte size than the blob's nbytes: `engine_data.size`), checks them against the SHA-256
// the key names before anything deserializes them (`engine_data.digest`; a truncated, altered or
// foreign .ptd never reaches the SDK), deserializes them and frees its view of the bytes; every
// later asker of the same program, device and key shares that engine (each engine still makes its
// own execution context). The last holder's release destroys it. Thread-safe: a key's first asker
// deserializes under that key's lock alone, so plans under other keys deserialize meanwhile.
#pragma once

#include "blob.h"

#include <functional>
#include <memory>

namespace tte {

// A deserialized plan, type-erased: an nvinfer1 engine in the product, the tests' fake.
using PlanHandle = std::shared_ptr<void>;
using Deserialize = std::function<Result<PlanHandle>(const void* plan, size_t nbytes, Reason& why)>;

Result<PlanHandle> shared_plan(const BlobInfo& info, const Deserialize& deserialize, Reason& why);

}  // namespace tte
