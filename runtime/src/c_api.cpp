// The C API of CONTRACTS.md §4; see tte/c_api.h.
#include <tte/c_api.h>
#include <tte/counters.h>

#ifndef TTE_ENGINES  // as engine.cpp: set by CMake for the library
#define TTE_ENGINES "reference"
#endif

extern "C" {

__attribute__((visibility("default"))) uint64_t tte_runtime_copy_bytes(const char* fqn) noexcept {
  return tte::copied_bytes(fqn);
}

__attribute__((visibility("default"))) uint64_t tte_runtime_execute_count(void) noexcept {
  return tte::execute_count();
}

__attribute__((visibility("default"))) void tte_runtime_reset_counters(void) noexcept {
  tte::reset_counters();
}

__attribute__((visibility("default"))) const char* tte_runtime_version(void) noexcept {
  return "tte-runtime 0.1 (engines: " TTE_ENGINES ")";  // compiled_engines(), as a literal
}

}  // extern "C"
