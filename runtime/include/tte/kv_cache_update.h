// The kernel `tte::kv_cache_update.out` (CONTRACTS.md §3), registered into ExecuTorch's kernel
// registry when the runtime library is loaded.
//
// Invariant: the result in `out` equals aten.index_copy(cache, dim, index, update). When `out`
// is `cache` (same data pointer) only the rows named by `index` are written; otherwise `cache`
// is copied into `out` once first. Element type is handled generically by element size (any
// dtype, any rank, any dim); contiguous tensors only. Every violated precondition — index out of
// [0, cache.size(dim)), shapes, dtypes, rank, partial overlap — fails the kernel context with
// InvalidArgument and an error log naming it, writing nothing.
#pragma once

#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/kernel/kernel_runtime_context.h>

namespace tte {

executorch::aten::Tensor& kv_cache_update_out(executorch::runtime::KernelRuntimeContext& ctx,
                                              const executorch::aten::Tensor& cache, int64_t dim,
                                              const executorch::aten::Tensor& index,
                                              const executorch::aten::Tensor& update,
                                              executorch::aten::Tensor& out);

}  // namespace tte
