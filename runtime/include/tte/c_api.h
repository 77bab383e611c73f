// The runtime library's C API for Python's ctypes (CONTRACTS.md §4).
//
// Invariant: these functions never fail and never allocate on the caller's behalf; the returned
// version string is static.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

uint64_t tte_runtime_copy_bytes(const char* fqn);
uint64_t tte_runtime_execute_count(void);
void tte_runtime_reset_counters(void);
const char* tte_runtime_version(void);

#ifdef __cplusplus
}
#endif
