// The thread's last refusal and `Reason`; see refusal.h and common.h.
#include "refusal.h"

#include "common.h"

#include <executorch/runtime/platform/log.h>

#include <cstdarg>
#include <cstdio>

namespace tte {
namespace {

thread_local char t_refusal[kRefusalBytes];
thread_local const char* t_check = "";

}  // namespace

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(&s[0], s.size() + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

Error Reason::fail(Error code, const char* check_id, std::string sentence) {
  check = check_id;
  text = std::move(sentence);
  return code;
}

bool Reason::reject(const char* check_id, std::string sentence) {
  check = check_id;
  text = std::move(sentence);
  return false;
}

void refuse(const char* check, const char* fmt, ...) noexcept {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(t_refusal, sizeof t_refusal, fmt, ap);
  va_end(ap);
  t_check = check != nullptr ? check : "";
  ET_LOG(Error, "%s", t_refusal);
}

void record_refusal(const char* check, const char* text) noexcept {
  std::snprintf(t_refusal, sizeof t_refusal, "%s", text != nullptr ? text : "");
  t_check = check != nullptr ? check : "";
}

const char* last_refusal() noexcept { return t_refusal; }

const char* last_check() noexcept { return t_check; }

void clear_refusal() noexcept {
  t_refusal[0] = '\0';
  t_check = "";
}

}  // namespace tte
