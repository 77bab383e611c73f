// The runtime library's C API for Python's ctypes (CONTRACTS.md §4).
//
// Invariant: the counter, version and refusal functions never fail, never allocate, never lock
// and never throw (they are noexcept: no C++ exception can cross into C); an unknown or null
// `fqn` reads 0. The returned version string is a compile-time constant; the refusal string is
// the calling thread's (valid until its next refusal or clear), the check id a string constant.
// `tte_runtime_check_blob` runs the runtime's blob reader (it allocates while reading) and
// catches everything it could throw.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define TTE_C_NOEXCEPT noexcept
extern "C" {
#else
#define TTE_C_NOEXCEPT
#endif

uint64_t tte_runtime_copy_bytes(const char* fqn) TTE_C_NOEXCEPT;
uint64_t tte_runtime_execute_count(void) TTE_C_NOEXCEPT;
void tte_runtime_reset_counters(void) TTE_C_NOEXCEPT;
const char* tte_runtime_version(void) TTE_C_NOEXCEPT;
// The last refusal (init or execute) of a TensorRTBackend delegate on the calling thread, with
// its reason and the delegate it concerns; "" when none since the last clear.
const char* tte_runtime_last_refusal(void) TTE_C_NOEXCEPT;
// The stable check id of that refusal (docs/CONTRACTS.md §1 "Check ids", e.g.
// "json.duplicate_key", "execute.nbytes"); "" when none since the last clear.
const char* tte_runtime_last_check(void) TTE_C_NOEXCEPT;
void tte_runtime_clear_last_refusal(void) TTE_C_NOEXCEPT;
// Reads a delegate blob as `init` does before creating the engine (parse, integrity, validate,
// binding plan): 0 when accepted, else the ExecuTorch error code, with the reason written into
// `why` (cut to `why_size` bytes, NUL-terminated; `why` may be null). It is also recorded as the
// thread's last refusal (text and check id, not logged); an accepted blob clears both.
int tte_runtime_check_blob(const void* data, size_t size, char* why,
                           size_t why_size) TTE_C_NOEXCEPT;

#ifdef __cplusplus
}
#endif
