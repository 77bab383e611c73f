// Checks of a reference payload (an ExecuTorch program, CONTRACTS.md §2) that ExecuTorch 1.5.1's
// loader does not make reliably: every tensor an instruction passes has data when it runs —
// storage (memory planned, constant, external or empty), a method input or output (the engine
// binds those) or the output of an earlier et_view of such a tensor (ExecuTorch leaves any other
// tensor's data null and kernels write through it); every instruction is a
// KernelCall (a FreeCall nulls a tensor's data, found by runtime/fuzz/fuzz_init; move, jump and
// delegate calls have no place in a reference payload either); every KernelCall names
// an operator that exists and has a name (Method::init keeps only the last instruction's resolve
// error, so an earlier bad operator index would load "successfully" and crash at execute).
//
// Invariant: `check_kernel_calls` reads the flatbuffer with its own bounds checks on every offset
// it follows (it does not trust the program to have been verified), never reads outside
// [data, data+size), and returns false with `why` (payload.unreadable, payload.instruction,
// payload.operator_index, payload.operator_name or payload.dataless_tensor) naming the method,
// the instruction and the operator index on the first defect.
#pragma once

#include "common.h"

#include <cstddef>

namespace tte {

bool check_kernel_calls(const void* data, size_t size, const char* method, Reason& why);

}  // namespace tte
