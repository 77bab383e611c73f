// The reference engine (CONTRACTS.md §2): the payload is an ExecuTorch program whose method
// "forward" takes the input bindings and returns the output bindings, in binding order, with
// graph inputs and outputs not memory planned.
//
// Invariant: the engine never copies binding data. Inputs are handed to the method with
// Method::set_input on inputs that are not memory planned, which shares the caller's pointer
// (ExecuTorch's method.cpp: `share_tensor_data` unless `is_memory_planned()`); outputs with
// Method::set_output_data_ptr. `create` refuses a payload whose inputs or outputs are memory
// planned, or whose method signature (count, dtype, shape) differs from the bindings. All method
// memory (planned arenas, method allocator, temp arena) is allocated in `create`.
#pragma once

#include "engine.h"

#include <memory>
#include <string>

namespace tte {

// Temp-allocator arena a kernel may use during one `run` (allocated once, reset after each run).
constexpr size_t kReferenceTempArenaBytes = 1 << 20;

Result<std::unique_ptr<Engine>> create_reference_engine(const BlobInfo& info, Reason& why);

}  // namespace tte
