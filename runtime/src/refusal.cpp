// The thread's last refusal; see tte/refusal.h.
#include <tte/refusal.h>

#include <executorch/runtime/platform/log.h>

#include <cstdarg>
#include <cstdio>

namespace tte {
namespace {

thread_local char t_refusal[kRefusalBytes];

}  // namespace

void refuse(const char* fmt, ...) noexcept {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(t_refusal, sizeof t_refusal, fmt, ap);
  va_end(ap);
  ET_LOG(Error, "%s", t_refusal);
}

const char* last_refusal() noexcept { return t_refusal; }

void clear_refusal() noexcept { t_refusal[0] = '\0'; }

}  // namespace tte
