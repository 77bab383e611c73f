// The C API of CONTRACTS.md §4; see tte/c_api.h.
#include <tte/c_api.h>
#include <tte/counters.h>
#include <tte/engine.h>

#include <string>

extern "C" {

__attribute__((visibility("default"))) uint64_t tte_runtime_copy_bytes(const char* fqn) {
  return tte::copied_bytes(fqn);
}

__attribute__((visibility("default"))) uint64_t tte_runtime_execute_count(void) {
  return tte::execute_count();
}

__attribute__((visibility("default"))) void tte_runtime_reset_counters(void) {
  tte::reset_counters();
}

__attribute__((visibility("default"))) const char* tte_runtime_version(void) {
  static const std::string v =
      std::string("tte-runtime 0.1 (engines: ") + tte::compiled_engines() + ")";
  return v.c_str();
}

}  // extern "C"
