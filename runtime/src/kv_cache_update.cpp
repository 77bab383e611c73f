// The kernel tte::kv_cache_update.out; see tte/kv_cache_update.h. Registered into ExecuTorch's
// kernel registry when this library is loaded.
#include <tte/kv_cache_update.h>

#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/dim_order_util.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/platform/log.h>

#include <cstring>

namespace tte {
namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::KernelRuntimeContext;

constexpr const char* kOp = "tte::kv_cache_update.out";

bool contiguous(const Tensor& t) {
  return executorch::runtime::is_contiguous_dim_order(t.dim_order().data(), t.dim());
}

bool overlap(const void* a, size_t na, const void* b, size_t nb) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return na && nb && pa < pb + nb && pb < pa + na;
}

// Ranks, dtypes and sizes: update differs from cache only along `dim`, out is cache's shape.
bool check_shapes(const Tensor& cache, int64_t dim, const Tensor& update, const Tensor& out) {
  const int64_t rank = cache.dim();
  if (update.dim() != rank) {
    ET_LOG(Error, "%s: update has rank %zd, cache has rank %lld", kOp, (ssize_t)update.dim(),
           (long long)rank);
    return false;
  }
  if (update.scalar_type() != cache.scalar_type() || out.scalar_type() != cache.scalar_type()) {
    ET_LOG(Error, "%s: dtypes differ: cache %s, update %s, out %s", kOp,
           executorch::runtime::toString(cache.scalar_type()),
           executorch::runtime::toString(update.scalar_type()),
           executorch::runtime::toString(out.scalar_type()));
    return false;
  }
  for (int64_t k = 0; k < rank; ++k) {
    if (k != dim && update.size(k) != cache.size(k)) {
      ET_LOG(Error,
             "%s: update size %zd at dim %lld differs from cache size %zd (only dim %lld "
             "may differ)",
             kOp, (ssize_t)update.size(k), (long long)k, (ssize_t)cache.size(k), (long long)dim);
      return false;
    }
  }
  if (out.dim() != rank) {
    ET_LOG(Error, "%s: out has rank %zd, cache has rank %lld", kOp, (ssize_t)out.dim(),
           (long long)rank);
    return false;
  }
  for (int64_t k = 0; k < rank; ++k) {
    if (out.size(k) != cache.size(k)) {
      ET_LOG(Error, "%s: out size %zd at dim %lld differs from cache size %zd", kOp,
             (ssize_t)out.size(k), (long long)k, (ssize_t)cache.size(k));
      return false;
    }
  }
  return true;
}

// index: 1-D int64, one entry per update position; then (the tensors contiguous) each entry
// inside [0, cache.size(dim)).
bool check_index(const Tensor& cache, int64_t dim, const Tensor& index, const Tensor& update,
                 const Tensor& out) {
  if (index.scalar_type() != ScalarType::Long || index.dim() != 1) {
    ET_LOG(Error, "%s: index must be a 1-D int64 tensor, got %s of rank %zd", kOp,
           executorch::runtime::toString(index.scalar_type()), (ssize_t)index.dim());
    return false;
  }
  if (index.size(0) != update.size(dim)) {
    ET_LOG(Error, "%s: index has %zd entries, update has %zd positions along dim %lld", kOp,
           (ssize_t)index.size(0), (ssize_t)update.size(dim), (long long)dim);
    return false;
  }
  if (!contiguous(cache) || !contiguous(update) || !contiguous(out)) {
    ET_LOG(Error, "%s: cache, update and out must be contiguous", kOp);
    return false;
  }
  const int64_t* idx = index.const_data_ptr<int64_t>();
  const int64_t positions = cache.size(dim);
  for (ssize_t i = 0; i < index.size(0); ++i) {
    if (idx[i] < 0 || idx[i] >= positions) {
      ET_LOG(Error, "%s: index[%zd] = %lld is outside [0, %lld) along dim %lld", kOp, i,
             (long long)idx[i], (long long)positions, (long long)dim);
      return false;
    }
  }
  return true;
}

// out either is cache or overlaps neither cache nor update.
bool check_memory(const Tensor& cache, const Tensor& update, const Tensor& out) {
  const void* o = out.const_data_ptr();
  if (o != cache.const_data_ptr() &&
      overlap(o, out.nbytes(), cache.const_data_ptr(), cache.nbytes())) {
    ET_LOG(Error, "%s: out partially overlaps cache (it must be the same memory or disjoint)", kOp);
    return false;
  }
  if (overlap(o, out.nbytes(), update.const_data_ptr(), update.nbytes())) {
    ET_LOG(Error, "%s: update overlaps out", kOp);
    return false;
  }
  return true;
}

// Every precondition of §3, in order; logs the first violated one and returns false.
bool check(const Tensor& cache, int64_t& dim, const Tensor& index, const Tensor& update,
           const Tensor& out) {
  const int64_t rank = cache.dim();
  if (rank < 1 || dim < -rank || dim >= rank) {
    ET_LOG(Error, "%s: dim %lld is out of range for a rank-%lld cache", kOp, (long long)dim,
           (long long)rank);
    return false;
  }
  if (dim < 0) dim += rank;
  return check_shapes(cache, dim, update, out) && check_index(cache, dim, index, update, out) &&
         check_memory(cache, update, out);
}

}  // namespace

Tensor& kv_cache_update_out(KernelRuntimeContext& ctx, const Tensor& cache, int64_t dim,
                            const Tensor& index, const Tensor& update, Tensor& out) {
  if (!check(cache, dim, index, update, out)) {
    ctx.fail(Error::InvalidArgument);
    return out;
  }
  auto* dst = static_cast<uint8_t*>(out.mutable_data_ptr());
  if (dst != cache.const_data_ptr()) {
    std::memcpy(dst, cache.const_data_ptr(), cache.nbytes());  // out-of-place: one full copy
  }
  // View both as [outer, positions, row] with `row` the bytes of one position.
  size_t outer = 1, row = cache.element_size();
  for (int64_t k = 0; k < dim; ++k) outer *= static_cast<size_t>(cache.size(k));
  for (int64_t k = dim + 1; k < cache.dim(); ++k) row *= static_cast<size_t>(cache.size(k));
  const size_t positions = static_cast<size_t>(cache.size(dim));
  const size_t n = static_cast<size_t>(update.size(dim));
  const auto* src = static_cast<const uint8_t*>(update.const_data_ptr());
  const int64_t* idx = index.const_data_ptr<int64_t>();
  for (size_t o = 0; o < outer; ++o) {
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(dst + (o * positions + static_cast<size_t>(idx[i])) * row,
                  src + (o * n + i) * row, row);
    }
  }
  return out;
}

namespace {

using executorch::runtime::EValue;
using executorch::runtime::Span;

// The boxed entry ExecuTorch calls. It checks the instruction's arguments — their number and
// kinds — before unboxing them, so a hostile payload fails the call instead of reading past the
// argument list or aborting in EValue::toTensor (ExecuTorch's generic boxing wrapper,
// EXECUTORCH_LIBRARY, checks neither: found by runtime/fuzz/fuzz_init).
void kv_cache_update_boxed(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  constexpr bool kIsTensor[5] = {true, false, true, true, true};  // cache, dim, index, update, out
  bool ok = stack.size() >= 5;
  for (size_t i = 0; ok && i < 5; ++i) {
    ok = stack[i] != nullptr && (kIsTensor[i] ? stack[i]->isTensor() : stack[i]->isInt());
  }
  if (!ok) {
    ET_LOG(Error,
           "tte::kv_cache_update.out: called with %zu arguments that are not (Tensor "
           "cache, int dim, Tensor index, Tensor update, Tensor out); the program is corrupt",
           stack.size());
    ctx.fail(Error::InvalidArgument);
    return;
  }
  kv_cache_update_out(ctx, stack[0]->toTensor(), stack[1]->toInt(), stack[2]->toTensor(),
                      stack[3]->toTensor(), stack[4]->toTensor());
}

// Registration at load time.
const Error registered = executorch::runtime::register_kernel(
    executorch::runtime::Kernel("tte::kv_cache_update.out", kv_cache_update_boxed));

}  // namespace
}  // namespace tte
