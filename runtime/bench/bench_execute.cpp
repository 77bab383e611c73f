// Times TensorRTBackend::execute on a blob (reference engine) directly through the backend
// interface, with zero-filled tensors for every delegate argument. Prints one line per figure:
//   execute_us_per_call=<float>
//   copy_bytes_per_call[<key>]=<int>   (for every counter key of the blob's copy plan)
// Invariant: measures only init-once/execute-many, as a delegate runs; never a test gate.
#include <tte/backend.h>
#include <tte/c_api.h>

#include "binding_plan.h"
#include "blob.h"

#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/platform/runtime.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace executorch::runtime;
using executorch::extension::make_tensor_ptr;
using executorch::extension::TensorPtr;

namespace {

// Zero-filled tensors for every delegate input and output binding of `info`, in call order.
struct Args {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<TensorPtr> tensors;
  std::vector<EValue> values;
  std::vector<EValue*> pointers;
};

void make_args(const tte::BlobInfo& info, Args& a) {
  auto add = [&](const tte::Binding& b) {
    a.storage.emplace_back(b.nbytes(), 0);
    std::vector<executorch::aten::SizesType> sizes(b.shape.begin(), b.shape.end());
    a.tensors.push_back(
        make_tensor_ptr(sizes, a.storage.back().data(), tte::dtype_scalar_type(b.dtype)));
  };
  a.storage.reserve(64);
  for (const auto& name : info.delegate_inputs) add(*info.input(name));
  for (const auto& name : info.delegate_outputs) add(*info.output(name));
  for (auto& t : a.tensors) a.values.emplace_back(*t);
  for (auto& v : a.values) a.pointers.push_back(&v);
}

void print_copies(const tte::BlobInfo& info, const tte::BindingPlan& plan, long iters) {
  for (const auto& c : plan.copies) {
    std::printf("copy_bytes_per_call[%s]=%llu\n", c.counter_key.c_str(),
                static_cast<unsigned long long>(tte_runtime_copy_bytes(c.counter_key.c_str()) /
                                                static_cast<uint64_t>(iters)));
  }
  for (const auto& b : info.buffers) {
    std::printf("buffer_bytes_per_call[%s]=%llu\n", b.fqn.c_str(),
                static_cast<unsigned long long>(tte_runtime_copy_bytes(b.fqn.c_str()) /
                                                static_cast<uint64_t>(iters)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s BLOB [ITERATIONS]\n", argv[0]);
    return 2;
  }
  runtime_init();
  const long iters = argc > 2 ? std::stol(argv[2]) : 20000;
  std::ifstream f(argv[1], std::ios::binary);
  std::string blob((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  tte::Reason why;
  auto info = tte::parse_blob(blob.data(), blob.size(), why);
  if (!info.ok()) {
    std::fprintf(stderr, "%s\n", why.text.c_str());
    return 1;
  }
  auto plan = tte::plan_bindings(info.get(), why);
  if (!plan.ok()) {
    std::fprintf(stderr, "%s\n", why.text.c_str());
    return 1;
  }
  Args args;
  make_args(info.get(), args);
  BackendInterface* backend = get_backend_class("TensorRTBackend");
  executorch::extension::MallocMemoryAllocator alloc;
  BackendInitContext init_ctx(&alloc);
  FreeableBuffer processed(blob.data(), blob.size(), nullptr);
  auto handle = backend->init(init_ctx, &processed, {});
  if (!handle.ok()) return 1;
  BackendExecutionContext ctx;
  Span<EValue*> span(args.pointers.data(), args.pointers.size());
  for (int i = 0; i < 200; ++i) {
    if (backend->execute(ctx, handle.get(), span) != Error::Ok) return 1;
  }
  tte_runtime_reset_counters();
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i) (void)backend->execute(ctx, handle.get(), span);
  auto t1 = std::chrono::steady_clock::now();
  double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / double(iters);
  std::printf("execute_us_per_call=%.3f\n", us);
  print_copies(info.get(), plan.get(), iters);
  backend->destroy(handle.get());
  return 0;
}
