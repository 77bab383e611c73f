// The runtime library's C API for Python's ctypes (CONTRACTS.md §4).
//
// Invariant: these functions never fail, never allocate, never lock and never throw (they are
// noexcept: no C++ exception can cross into C); an unknown or null `fqn` reads 0. The returned
// version string is a compile-time constant.
#pragma once

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

#ifdef __cplusplus
}
#endif
