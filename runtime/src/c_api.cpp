// The C API of CONTRACTS.md §4; see tte/c_api.h.
#include <tte/c_api.h>
#include <tte/device.h>

#include "binding_plan.h"
#include "blob.h"
#include "counters.h"
#include "refusal.h"

#include <executorch/runtime/platform/platform.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#ifndef TTE_ENGINES  // as engine.cpp: set by CMake for the library
#define TTE_ENGINES "reference"
#endif

#define TTE_EXPORT __attribute__((visibility("default")))

namespace {

// parse_blob and plan_bindings never throw; the std::string copies into `why` could.
int check_blob(const void* data, size_t size, tte::Reason& why) {
  auto info = tte::parse_blob(data, size, why);
  if (!info.ok()) return static_cast<int>(info.error());
  auto plan = tte::plan_bindings(info.get(), why);
  return plan.ok() ? 0 : static_cast<int>(plan.error());
}

// One line per write the runtime's binding plan makes into an input binding per call:
// "<input>\t<buffer fqn or empty>\t<in_place|copy>\t<output>\n".
std::string blob_writes(const tte::BlobInfo& info, const tte::BindingPlan& plan) {
  std::string text;
  auto line = [&](uint32_t input, const char* how, size_t output) {
    const std::string& name = info.inputs[input].name;
    const std::string* fqn = info.buffer_fqn(name);
    text += name + "\t" + (fqn ? *fqn : std::string()) + "\t" + how + "\t" +
            info.outputs[output].name + "\n";
  };
  for (size_t o = 0; o < plan.outputs.size(); ++o) {
    if (plan.outputs[o].target == tte::OutputTarget::AliasedInput) {
      line(plan.outputs[o].input, "in_place", o);
    }
  }
  for (const tte::CopyStep& c : plan.copies) {
    if (c.kind != tte::CopyKind::InputToDelegateOutput) line(c.input, "copy", c.output);
  }
  return text;
}

// ExecuTorch's informational log lines (cpuinfo probing at every kernel-library start, ...) are
// noise to a user of the commands; errors are not.
std::atomic<bool> g_log_info{false};

}  // namespace

extern "C" {

TTE_EXPORT void tte_runtime_log_info(int enabled) noexcept {
  g_log_info.store(enabled != 0, std::memory_order_relaxed);
}

TTE_EXPORT void tte_runtime_emit_log(et_timestamp_t timestamp, et_pal_log_level_t level,
                                     const char* filename, const char* function, size_t line,
                                     const char* message, size_t length) noexcept {
  (void)function;
  (void)length;
  if ((level == kInfo || level == kDebug) && !g_log_info.load(std::memory_order_relaxed)) return;
  const char* base = filename ? std::strrchr(filename, '/') : nullptr;
  base = base ? base + 1 : (filename ? filename : "?");
  unsigned long long us = static_cast<unsigned long long>(timestamp) / 1000;  // ns ticks
  std::fprintf(stderr, "%c %02llu:%02llu:%02llu.%06llu executorch:%s:%zu] %s\n",
               static_cast<char>(level), us / 3600000000ULL, us / 60000000ULL % 60,
               us / 1000000ULL % 60, us % 1000000ULL, base, line, message ? message : "");
}

TTE_EXPORT uint64_t tte_runtime_copy_bytes(const char* fqn) noexcept {
  return tte::copied_bytes(fqn);
}

TTE_EXPORT uint64_t tte_runtime_copy_bytes_by_path(const char* fqn, int path) noexcept {
  if (path < 0 || path > 2) return 0;
  return tte::copied_bytes(fqn, static_cast<tte::CopyPath>(path));
}

TTE_EXPORT uint64_t tte_runtime_execute_count(void) noexcept { return tte::execute_count(); }

TTE_EXPORT void tte_runtime_reset_counters(void) noexcept { tte::reset_counters(); }

TTE_EXPORT const char* tte_runtime_version(void) noexcept {
  return "tte-runtime 0.1 (engines: " TTE_ENGINES ")";  // compiled_engines(), as a literal
}

TTE_EXPORT const char* tte_runtime_last_refusal(void) noexcept { return tte::last_refusal(); }

TTE_EXPORT const char* tte_runtime_last_check(void) noexcept { return tte::last_check(); }

TTE_EXPORT void tte_runtime_clear_last_refusal(void) noexcept { tte::clear_refusal(); }

TTE_EXPORT int tte_runtime_check_blob(const void* data, size_t size, char* why,
                                      size_t why_size) noexcept {
  tte::Reason reason;
  int code = 0;
  try {
    code = check_blob(data, size, reason);
  } catch (...) {
    code = static_cast<int>(tte::Error::MemoryAllocationFailed);
    reason.check = "runtime.out_of_memory";
  }
  const char* text = code == 0 ? "" : reason.text.empty() ? "out of memory" : reason.text.c_str();
  if (code == 0) {
    tte::clear_refusal();
  } else {
    tte::record_refusal(reason.check, text);
  }
  if (why != nullptr && why_size > 0) std::snprintf(why, why_size, "%s", text);
  return code;
}

TTE_EXPORT int tte_runtime_blob_writes(const void* data, size_t size, char* out,
                                       size_t out_size) noexcept {
  tte::Reason reason;
  std::string text;
  int code = 0;
  try {
    auto info = tte::parse_blob(data, size, reason);
    auto plan = info.ok() ? tte::plan_bindings(info.get(), reason)
                          : tte::Result<tte::BindingPlan>(info.error());
    code = plan.ok() ? 0 : static_cast<int>(plan.error());
    text = plan.ok() ? blob_writes(info.get(), plan.get()) : reason.text;
  } catch (...) {
    code = static_cast<int>(tte::Error::MemoryAllocationFailed);
    text = "out of memory";
  }
  if (code == 0 && text.size() + 1 > out_size) code = static_cast<int>(tte::Error::InvalidArgument);
  if (out != nullptr && out_size > 0) std::snprintf(out, out_size, "%s", text.c_str());
  return code;
}

TTE_EXPORT int tte_runtime_use_device(const char* kind, char* why, size_t why_size) noexcept {
  std::string reason;
  const int code = tte::use_device(kind, reason);
  if (why != nullptr && why_size > 0) std::snprintf(why, why_size, "%s", reason.c_str());
  return code;
}

TTE_EXPORT const char* tte_runtime_device_name(void) noexcept { return tte::device_name(); }

}  // extern "C"
