// The C API of CONTRACTS.md §4; see tte/c_api.h.
#include <tte/blob.h>
#include <tte/c_api.h>
#include <tte/counters.h>
#include <tte/plan.h>
#include <tte/refusal.h>

#include <cstdio>
#include <exception>
#include <string>

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

__attribute__((visibility("default"))) const char* tte_runtime_last_refusal(void) noexcept {
  return tte::last_refusal();
}

__attribute__((visibility("default"))) void tte_runtime_clear_last_refusal(void) noexcept {
  tte::clear_refusal();
}

__attribute__((visibility("default"))) int tte_runtime_check_blob(const void* data, size_t size,
                                                                  char* why,
                                                                  size_t why_size) noexcept {
  std::string reason;
  int code = 0;
  try {
    auto info = tte::parse_blob(data, size, reason);
    if (!info.ok()) {
      code = static_cast<int>(info.error());
    } else if (auto plan = tte::plan_bindings(info.get(), reason); !plan.ok()) {
      code = static_cast<int>(plan.error());
    }
  } catch (const std::exception& e) {
    code = static_cast<int>(tte::Error::MemoryAllocationFailed);
    reason = e.what();
  }
  if (why != nullptr && why_size > 0)
    std::snprintf(why, why_size, "%s", code ? reason.c_str() : "");
  return code;
}

}  // extern "C"
