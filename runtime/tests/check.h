// A minimal test harness for the runtime's ctest executables (no gtest in the wheel's world).
//
// Invariant: a test binary exits non-zero iff a CHECK failed or a test returned early through
// one; every failure prints file:line, the expression and both values. ExecuTorch's log lines
// are captured (and still echoed) so tests can assert the exact error text the runtime logs.
#pragma once

#include <executorch/runtime/platform/platform.h>
#include <executorch/runtime/platform/runtime.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace tte_test {

struct Case {
  const char* name;
  std::function<void()> fn;
};
inline std::vector<Case>& cases() {
  static std::vector<Case> c;
  return c;
}
inline int& failures() {
  static int f = 0;
  return f;
}
struct Registrar {
  Registrar(const char* n, std::function<void()> f) { cases().push_back({n, std::move(f)}); }
};

inline std::string& log_buffer() {
  static std::string s;
  return s;
}
inline void clear_logs() { log_buffer().clear(); }
// True when some captured log line contains `needle`.
inline bool logged(const std::string& needle) {
  return log_buffer().find(needle) != std::string::npos;
}

inline void capture_log(et_timestamp_t, et_pal_log_level_t level, const char*, const char*, size_t,
                        const char* message, size_t length) {
  log_buffer().append(message, length);
  log_buffer().push_back('\n');
  std::fprintf(stderr, "  [et %c] %.*s\n", static_cast<char>(level), static_cast<int>(length),
               message);
}

template <class A, class B>
std::string show(const A& a, const B& b) {
  std::ostringstream s;
  s << "\n      left:  " << a << "\n      right: " << b;
  return s.str();
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return {};
  }
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline int run_all() {
  executorch::runtime::runtime_init();
  executorch::runtime::register_pal(executorch::runtime::PalImpl::create(capture_log, __FILE__));
  for (auto& c : cases()) {
    int before = failures();
    clear_logs();
    c.fn();
    std::printf("%s %s\n", failures() == before ? "PASS" : "FAIL", c.name);
  }
  std::printf("%zu tests, %d failed checks\n", cases().size(), failures());
  return failures() ? 1 : 0;
}

}  // namespace tte_test

#define TTE_CAT2(a, b) a##b
#define TTE_CAT(a, b) TTE_CAT2(a, b)
#define TEST(name)                                               \
  static void name();                                            \
  static ::tte_test::Registrar TTE_CAT(reg_, name)(#name, name); \
  static void name()

#define FAIL_AT(msg)                                                            \
  do {                                                                          \
    ++::tte_test::failures();                                                   \
    std::printf("  %s:%d: %s\n", __FILE__, __LINE__, std::string(msg).c_str()); \
  } while (0)

#define CHECK(cond)                                  \
  do {                                               \
    if (!(cond)) FAIL_AT("CHECK(" #cond ") failed"); \
  } while (0)

#define CHECK_EQ(a, b)                                                               \
  do {                                                                               \
    const auto& _a = (a);                                                            \
    const auto& _b = (b);                                                            \
    if (!(_a == _b)) FAIL_AT("CHECK_EQ(" #a ", " #b ")" + ::tte_test::show(_a, _b)); \
  } while (0)

// Stop the current test when `cond` fails (for preconditions of the checks that follow).
#define REQUIRE(cond)                       \
  do {                                      \
    if (!(cond)) {                          \
      FAIL_AT("REQUIRE(" #cond ") failed"); \
      return;                               \
    }                                       \
  } while (0)

#define TEST_MAIN() \
  int main() { return ::tte_test::run_all(); }
