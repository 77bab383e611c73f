// Binding dtypes of the blob (CONTRACTS.md §1) and their ExecuTorch scalar types.
//
// Invariant: the table here is the one in python's blob.DTYPES — same names, same element
// sizes; a name not in it is refused by the blob parser.
#pragma once

#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tte {

enum class DType : uint8_t { Float32, Float16, BFloat16, Int64, Int32, Int8, UInt8, Bool, Float64 };

// false when `name` is not a known dtype (compared whole: a NUL inside does not end it).
bool dtype_from_name(const std::string& name, DType& out);
const char* dtype_name(DType d);
size_t dtype_size(DType d);
executorch::aten::ScalarType dtype_scalar_type(DType d);
// Comma-separated list of the known names (for messages).
const char* dtype_known_names();

}  // namespace tte
