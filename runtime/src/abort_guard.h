// Containing ExecuTorch's aborts while a reference payload loads or runs.
//
// ExecuTorch's kernels and value accessors end the process (ET_CHECK -> runtime_abort ->
// pal_abort) when a program's values do not fit its operators — e.g. `EValue::toTensor` on an
// integer argument, found by runtime/fuzz/fuzz_init on payloads with valid digests. The
// reference engine runs an untrusted nested program, so around its loading and its `execute` it
// uses `contained`: while the callable runs on this thread, ExecuTorch's PAL abort throws
// `PayloadAborted` instead, which `contained` catches, returning Error::Internal with `aborted`
// set. Invariant: outside `contained` (other threads, other code) ExecuTorch's abort behaves as
// before — the handler installed into ExecuTorch's PAL table forwards to the previous one. The
// cut-short program may hold inconsistent state: a caller must not run it again (the reference
// engine refuses every later call). Nothing here allocates unless an abort is contained.
#pragma once

#include "common.h"

namespace tte {

struct PayloadAborted {};

namespace detail {
void install_abort_handler();  // once per process
struct ContainScope {
  ContainScope();
  ~ContainScope();
};
}  // namespace detail

template <class F>
Error contained(F&& f, bool& aborted) {
  detail::install_abort_handler();
  detail::ContainScope scope;
  try {
    return f();
  } catch (const PayloadAborted&) {
    aborted = true;
    return Error::Internal;
  }
}

}  // namespace tte
