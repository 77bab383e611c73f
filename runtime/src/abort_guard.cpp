// The PAL abort handler behind tte::contained; see tte/abort_guard.h.
#include "abort_guard.h"

#include <executorch/runtime/platform/platform.h>

#include <cstdlib>
#include <mutex>

namespace tte {
namespace {

thread_local int t_contain_depth = 0;
void (*g_previous)() = nullptr;  // the PAL abort before ours

void contained_abort() {
  if (t_contain_depth > 0) throw PayloadAborted{};
  if (g_previous != nullptr) g_previous();
  std::abort();  // the PAL's abort must not return
}

}  // namespace

namespace detail {

void install_abort_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    // ExecuTorch exposes its live PAL table; registering through register_pal() would log an
    // error when another component (its Python bindings) registered first.
    auto* pal = const_cast<executorch::runtime::PalImpl*>(executorch::runtime::get_pal_impl());
    if (pal == nullptr || pal->abort == &contained_abort) return;
    g_previous = pal->abort;
    pal->abort = &contained_abort;
  });
}

ContainScope::ContainScope() { ++t_contain_depth; }
ContainScope::~ContainScope() { --t_contain_depth; }

}  // namespace detail
}  // namespace tte
