// Shared by the libFuzzer harnesses: ExecuTorch initialised once with its log silenced (every
// refusal logs; printing them would be most of the run time; TTE_FUZZ_LOG=1 prints them).
//
// Invariant: `fuzz_init_once` is idempotent and leaves the process's backend and kernel
// registrations (the static initialisers of the runtime sources linked in) untouched.
#pragma once

#include <executorch/runtime/platform/platform.h>
#include <executorch/runtime/platform/runtime.h>

#include <cstdio>
#include <cstdlib>

namespace tte_fuzz {

inline void quiet_log(et_timestamp_t, et_pal_log_level_t, const char*, const char*, size_t,
                      const char* message, size_t length) {
  static const bool loud = std::getenv("TTE_FUZZ_LOG") != nullptr;
  if (loud) std::fprintf(stderr, "[et] %.*s\n", static_cast<int>(length), message);
}

inline void fuzz_init_once() {
  static const bool done = [] {
    executorch::runtime::runtime_init();
    executorch::runtime::register_pal(executorch::runtime::PalImpl::create(quiet_log, __FILE__));
    return true;
  }();
  (void)done;
}

}  // namespace tte_fuzz
