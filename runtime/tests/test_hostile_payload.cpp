// Hostile reference payloads through the backend: a payload whose every
// byte in turn is flipped — the blob resealed, so the nested program itself is what is tested —
// is refused at init with a reason naming the delegate, or initialises and executes (Ok or an
// error) without crashing; an operator index out of range is refused at init by name. The last
// refusal reaches C callers through tte_runtime_last_refusal, and tte_runtime_check_blob gives the
// reader's verdict.
#include "blob_builder.h"
#include "check.h"
#include "delegate_args.h"

#include <tte/backend.h>
#include <tte/c_api.h>

#include "abort_guard.h"
#include "blob.h"

#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/backend/interface.h>

#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <cstring>
#include <vector>

using executorch::aten::ScalarType;
using executorch::extension::make_tensor_ptr;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::BackendInterface;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Span;

namespace {

const std::string kPayloads = TTE_PAYLOADS_DIR;

BackendInterface* backend() { return executorch::runtime::get_backend_class("TensorRTBackend"); }

enum class Outcome { Refused, Ran, RunFailed };

// init, then (if accepted) one execute of kv_step's delegate call on fixed inputs.
Outcome init_and_run(const std::string& blob, std::string& refusal) {
  std::string bytes = blob;  // the processed segment outlives the delegate
  FreeableBuffer processed(bytes.data(), bytes.size(), nullptr);
  executorch::extension::MallocMemoryAllocator allocator;
  BackendInitContext ctx(&allocator, nullptr, "forward");
  tte_runtime_clear_last_refusal();
  auto handle = backend()->init(ctx, &processed, {});
  if (!handle.ok()) {
    refusal = tte_runtime_last_refusal();
    return Outcome::Refused;
  }
  std::vector<float> cache(2 * 4 * 1024, 0.5f), tok(2 * 1024, 3.f), logits(2 * 1024);
  std::vector<int64_t> pos = {1}, step = {10};
  auto t_tok = make_tensor_ptr({1, 2, 1, 1024}, tok.data(), ScalarType::Float);
  auto t_pos = make_tensor_ptr({1}, pos.data(), ScalarType::Long);
  auto t_cache = make_tensor_ptr({1, 2, 4, 1024}, cache.data(), ScalarType::Float);
  auto t_step = make_tensor_ptr({1}, step.data(), ScalarType::Long);
  auto t_logits = make_tensor_ptr({1, 2, 1024}, logits.data(), ScalarType::Float);
  std::vector<EValue> values = {EValue(*t_tok), EValue(*t_pos), EValue(*t_cache), EValue(*t_step),
                                EValue(*t_logits)};
  std::vector<EValue*> args;
  for (auto& v : values) args.push_back(&v);
  BackendExecutionContext ectx;
  Error e = backend()->execute(ectx, handle.get(), Span<EValue*>(args.data(), args.size()));
  backend()->destroy(handle.get());
  return e == Error::Ok ? Outcome::Ran : Outcome::RunFailed;
}

}  // namespace

TEST(every_flipped_payload_byte_is_refused_at_init_or_runs_without_crashing) {
  const std::string good = tte_test::read_file(kPayloads + "/kv_step.blob");
  tte::Reason why;
  auto info = tte::parse_blob(good.data(), good.size(), why);
  REQUIRE(info.ok());
  const size_t off = info->engine - reinterpret_cast<const uint8_t*>(good.data());
  std::string refusal;
  REQUIRE(init_and_run(good, refusal) == Outcome::Ran);
  size_t refused = 0, ran = 0, run_failed = 0, bad_operator = 0, unloadable = 0;
  for (size_t i = off; i < off + info->engine_size; ++i) {
    std::string b = good;
    b[i] ^= static_cast<char>(0xff);
    refusal.clear();
    switch (init_and_run(tte_test::reseal(b), refusal)) {
      case Outcome::Refused:
        ++refused;
        // named: the reason, then the delegate (method, size, bindings)
        CHECK(refusal.rfind("TensorRTBackend: init refused the delegate blob: ", 0) == 0);
        CHECK(refusal.find("(delegate of method 'forward': 3") != std::string::npos);
        if (refusal.find("calls operator") != std::string::npos) ++bad_operator;
        if (refusal.find("is not a loadable ExecuTorch program") != std::string::npos) {
          ++unloadable;
        }
        break;
      case Outcome::Ran: ++ran; break;
      case Outcome::RunFailed: ++run_failed; break;
    }
  }
  std::printf(
      "  payload flips: %zu refused (%zu bad operator index, %zu unverifiable), %zu ran, "
      "%zu failed at execute\n",
      refused, bad_operator, unloadable, ran, run_failed);
  CHECK(refused > 0 && bad_operator > 0 && unloadable > 0 && ran > 0);
}

TEST(an_operator_index_out_of_range_is_refused_at_init_naming_it) {
  // Flip the payload until init names an out-of-range operator (ExecuTorch 1.5.1 alone loads
  // such a program and crashes at execute).
  const std::string good = tte_test::read_file(kPayloads + "/kv_step.blob");
  tte::Reason why;
  auto info = tte::parse_blob(good.data(), good.size(), why);
  REQUIRE(info.ok());
  const size_t off = info->engine - reinterpret_cast<const uint8_t*>(good.data());
  std::string found;
  for (size_t i = off; i < off + info->engine_size && found.empty(); ++i) {
    std::string b = good, refusal;
    b[i] ^= static_cast<char>(0xff);
    if (init_and_run(tte_test::reseal(b), refusal) == Outcome::Refused &&
        refusal.find(", but the method has ") != std::string::npos) {
      found = refusal;
    }
  }
  REQUIRE(!found.empty());
  const std::string head =
      "TensorRTBackend: init refused the delegate blob: reference payload: "
      "method 'forward' instruction 0:";
  CHECK(found.rfind(head, 0) == 0);
  CHECK(found.find(" calls operator ") != std::string::npos);
}

TEST(last_refusal_names_init_and_execute_refusals_until_cleared) {
  tte_runtime_clear_last_refusal();
  CHECK_EQ(std::string(tte_runtime_last_refusal()), std::string(""));
  std::string b = tte_test::read_file(kPayloads + "/ring.blob");
  b[b.size() - 1] ^= 1;  // the payload's last byte: integrity refuses it
  std::string refusal;
  REQUIRE(init_and_run(b, refusal) == Outcome::Refused);
  CHECK(refusal.rfind("TensorRTBackend: init refused the delegate blob: engine payload SHA-256 "
                      "mismatch: ",
                      0) == 0);
  CHECK(refusal.find("(delegate of method 'forward': ") != std::string::npos);
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("blob.engine_digest"));
  // execute: ring's delegate takes x, ring and returns y; kv_step's five arguments are wrong
  const std::string ring = tte_test::read_file(kPayloads + "/ring.blob");
  CHECK(init_and_run(ring, refusal) == Outcome::RunFailed);
  CHECK_EQ(std::string(tte_runtime_last_refusal()),
           std::string("TensorRTBackend: the delegate call has 5 arguments, the blob declares 2 "
                       "inputs + 1 outputs"));
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("execute.arity"));
  tte_runtime_clear_last_refusal();
  CHECK_EQ(std::string(tte_runtime_last_refusal()), std::string(""));
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string(""));
}

TEST(check_blob_gives_the_readers_verdict) {
  const std::string good = tte_test::read_file(kPayloads + "/kv_step.blob");
  char why[256] = "unchanged";
  CHECK_EQ(tte_runtime_check_blob(good.data(), good.size(), why, sizeof why), 0);
  CHECK_EQ(std::string(why), std::string(""));
  CHECK_EQ(tte_runtime_check_blob("TR03", 4, why, sizeof why),
           static_cast<int>(Error::InvalidProgram));
  CHECK_EQ(std::string(why), std::string("blob is 4 bytes, shorter than its 32-byte header"));
  // the verdict is also the thread's last refusal, check id beside it; acceptance clears both
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string("blob.short"));
  CHECK_EQ(std::string(tte_runtime_last_refusal()), std::string(why));
  CHECK_EQ(tte_runtime_check_blob(good.data(), good.size(), why, sizeof why), 0);
  CHECK_EQ(std::string(tte_runtime_last_check()), std::string(""));
  CHECK_EQ(std::string(tte_runtime_last_refusal()), std::string(""));
  char tiny[8];
  CHECK_EQ(tte_runtime_check_blob("TR09", 4, tiny, sizeof tiny),
           static_cast<int>(Error::InvalidProgram));
  CHECK_EQ(std::string(tiny), std::string("blob is"));  // cut to the buffer, NUL-terminated
  CHECK_EQ(tte_runtime_check_blob("TR03", 4, nullptr, 0), static_cast<int>(Error::InvalidProgram));
}

// init, then `calls` executes on zero-filled arguments of the blob's own bindings; the last
// refusal after each step ("" when it passed).
std::vector<std::string> run_any(const std::string& blob, int calls) {
  std::vector<std::string> said;
  std::string bytes = blob;
  FreeableBuffer processed(bytes.data(), bytes.size(), nullptr);
  executorch::extension::MallocMemoryAllocator allocator;
  BackendInitContext ctx(&allocator, nullptr, "forward");
  tte_runtime_clear_last_refusal();
  auto handle = backend()->init(ctx, &processed, {});
  said.push_back(handle.ok() ? "" : tte_runtime_last_refusal());
  if (!handle.ok()) return said;
  tte::Reason why;
  auto info = tte::parse_blob(bytes.data(), bytes.size(), why);
  std::vector<std::vector<uint8_t>> storage;
  std::vector<executorch::extension::TensorPtr> tensors;
  if (info.ok() && tte_test::make_delegate_args(info.get(), 1 << 24, storage, tensors)) {
    std::vector<EValue> values;
    for (auto& t : tensors) values.emplace_back(*t);
    std::vector<EValue*> args;
    for (auto& v : values) args.push_back(&v);
    for (int k = 0; k < calls; ++k) {
      BackendExecutionContext ectx;
      Error e = backend()->execute(ectx, handle.get(), Span<EValue*>(args.data(), args.size()));
      said.push_back(e == Error::Ok ? "" : tte_runtime_last_refusal());
    }
  }
  backend()->destroy(handle.get());
  return said;
}

TEST(fuzz_regressions_fail_their_calls_instead_of_the_process) {
  const std::string dir = TTE_REGRESSIONS_DIR;
  // An instruction whose argument is an int where the kernel unboxes a tensor: ExecuTorch's
  // EValue::toTensor aborts; contained, the call fails and the delegate refuses later calls.
  for (const char* name : {"init-04c18899418f.blob", "init-8f040070a580.blob"}) {
    auto said = run_any(tte_test::reseal(tte_test::read_file(dir + "/" + name)), 2);
    REQUIRE(said.size() == 3);
    CHECK_EQ(said[0], std::string(""));
    CHECK(said[1].find("reference engine run failed (error 0x1): TensorRTBackend: the reference "
                       "payload aborted inside ExecuTorch") != std::string::npos);
    CHECK(said[2].find("aborted inside ExecuTorch in an earlier call; this delegate refuses "
                       "every later call") != std::string::npos);
    CHECK_EQ(std::string(tte_runtime_last_check()), std::string("execute.aborted"));
  }
  // A tensor-list argument where a tensor is unboxed: the same containment.
  auto list = run_any(tte_test::reseal(tte_test::read_file(dir + "/init-1cbbf047c4a4.blob")), 1);
  CHECK(list.back().find("aborted inside ExecuTorch") != std::string::npos);
  // tte::kv_cache_update.out called with 4 arguments: its own kernel refuses them.
  tte_test::clear_logs();
  auto kv = run_any(tte_test::reseal(tte_test::read_file(dir + "/init-6e64d05cb9b6.blob")), 1);
  REQUIRE(kv.size() == 2);
  CHECK_EQ(kv[1], std::string("TensorRTBackend: reference engine run failed (error 0x12)"));
  CHECK(
      tte_test::logged("tte::kv_cache_update.out: called with 4 arguments that are not (Tensor "
                       "cache, int dim, Tensor index, Tensor update, Tensor out)"));
}

TEST(fuzz_regressions_with_null_tensor_data_are_refused_at_init) {
  // Tensors ExecuTorch would leave without data, which kernels then dereference (SIGSEGV).
  const std::string dir = TTE_REGRESSIONS_DIR;
  const std::pair<const char*, const char*> cases[] = {
      {"init-7636cfa1e54b.blob",
       "method 'forward' instruction 0:0 (aten::sum) passes tensor "
       "value 2, which has no data (no storage, not a method input or "
       "output, not a view of data)"},
      {"init-9469243d76bd.blob",
       "method 'forward' instruction 0:2 (aten::slice_copy) passes "
       "tensor value 9, which has no data"},
      {"init-c4342ff67c62.blob",
       "method 'forward' instruction 0:2 (aten::slice_copy) passes "
       "tensor value 9, which has no data"},
      {"init-8dbf1ebd6fc5.blob",
       "method 'forward' instruction 0:0 is a free call; the "
       "reference engine runs straight-line kernel calls only"}};
  for (const auto& [name, reason] : cases) {
    auto said = run_any(tte_test::reseal(tte_test::read_file(dir + "/" + name)), 1);
    REQUIRE(said.size() == 1);
    CHECK(said[0].rfind("TensorRTBackend: init refused the delegate blob: reference payload: " +
                            std::string(reason),
                        0) == 0);
    CHECK_EQ(std::string(tte_runtime_last_check()),
             std::string(std::strstr(reason, "free call") ? "payload.instruction"
                                                          : "payload.dataless_tensor"));
  }
}

TEST(aborts_are_contained_only_inside_contained) {
  bool aborted = false;
  Error e = tte::contained(
      [] {
        executorch::runtime::runtime_abort();
        return Error::Ok;
      },
      aborted);
  CHECK(aborted);
  CHECK(e == Error::Internal);
  aborted = false;
  CHECK(tte::contained([] { return Error::InvalidArgument; }, aborted) == Error::InvalidArgument);
  CHECK(!aborted);
  // Outside `contained` ExecuTorch's abort still ends the process (in a child here).
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) executorch::runtime::runtime_abort();
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

TEST_MAIN()
