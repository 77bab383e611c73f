// The reference engine (CONTRACTS.md §2): the payload is an ExecuTorch program whose method
// "forward" takes the input bindings and returns the output bindings, in binding order, with
// graph inputs and outputs not memory planned.
//
// Invariant: the engine never copies binding data. Inputs are handed to the method with
// Method::set_input on inputs that are not memory planned, which shares the caller's pointer
// (ExecuTorch's method.cpp: `share_tensor_data` unless `is_memory_planned()`); outputs with
// Method::set_output_data_ptr. `create` refuses a payload whose inputs or outputs are memory
// planned, or whose method signature (count, dtype, shape) differs from the bindings. All method
// memory (planned arenas, method allocator, temp arena, device-mode staging) is allocated in
// `create`, but for scratch a kernel asks beyond the temp arena: served from the heap, once, and
// the arena grown to it (scratch_arena.h), so no kernel fails or logs for want of scratch. For a
// device delegate (its `target_device`) with a device active (device.h) the engine runs "on the
// device" as a test engine: bindings in device memory are staged through host memory with the
// device's copies (the only copies it makes), its scratch is device memory and `copy` moves
// device to device.
#pragma once

#include "engine.h"

#include <memory>
#include <string>

namespace tte {

// The temp arena's first size: what kernels may ask for scratch without touching the heap (it
// grows to the most one kernel asked for; ExecuTorch resets it after every kernel).
constexpr size_t kReferenceTempArenaBytes = 1 << 20;

// Device mode (a device is active): the bytes the engine moved between device memory and its host
// staging, counted under this key (the C API's tte_runtime_copy_bytes reads it) — the test
// engine's own traffic, never a buffer's.
constexpr const char* kDeviceStagingCounter = "tte.reference_engine.device_staging";

Result<std::unique_ptr<Engine>> create_reference_engine(const BlobInfo& info, Reason& why);

}  // namespace tte
