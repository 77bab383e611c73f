// libFuzzer harness: the blob reader (parse_blob: header, integrity, UTF-8, JSON, metadata,
// validate_blob) and the alias planner on what it accepts.
//
// Invariant checked (besides ASan/UBSan's): an accepted blob yields a complete plan or a
// refusal with a reason, never a crash; a refusal always says why and names its check id. Each
// input runs twice: as given (integrity checks included) and resealed (its TR03 digests recomputed,
// so mutations of the metadata reach the checks behind them).
#include "../tests/blob_builder.h"
#include "fuzz_common.h"

#include "binding_plan.h"
#include "blob.h"

#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

void read_and_plan(const std::string& blob) {
  tte::Reason why;
  auto info = tte::parse_blob(blob.data(), blob.size(), why);
  if (!info.ok()) {
    if (why.text.empty() || why.check[0] == '\0') std::abort();  // every refusal says why
    return;
  }
  for (const auto& b : info.get().inputs) (void)b.nbytes();
  for (const auto& b : info.get().outputs) (void)b.nbytes();
  tte::Reason plan_why;
  auto plan = tte::plan_bindings(info.get(), plan_why);
  if (!plan.ok() && (plan_why.text.empty() || plan_why.check[0] == '\0')) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tte_fuzz::fuzz_init_once();
  const std::string blob(reinterpret_cast<const char*>(data), size);
  read_and_plan(blob);
  const std::string sealed = tte_test::reseal(blob);
  if (sealed != blob) read_and_plan(sealed);
  return 0;
}
