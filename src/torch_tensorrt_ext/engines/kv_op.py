"""`tte::kv_cache_update`: the reference engine's stand-in for TensorRT's IKVCacheUpdateLayer.

Invariant (docs/CONTRACTS.md §3): both overloads compute exactly
`aten.index_copy(cache, dim, index, update)` — `update.select(dim, i)` lands at position
`index[i]` along `dim`, everything else is `cache` — and the `.out` overload writes only the
updated rows when `out` *is* `cache` (same memory), copying `cache` into `out` first only when
they are different memory. `index` is a 1-D int64 tensor with `len(index) == update.size(dim)`;
an index outside `[0, cache.size(dim))` is an error. The C++ runtime registers the same `.out`
kernel (runtime/src/kv_cache_update.cpp) into ExecuTorch's kernel registry, so a graph using this
op lowers to a program the reference engine runs with the aliased output written in place.

Importing this module defines the op (once per process).
"""
from __future__ import annotations

import torch
from ..errors import OutOfRange, UsageError

__all__ = ["kv_cache_update", "OP", "OUT_OP"]

_SCHEMA = "kv_cache_update(Tensor cache, int dim, Tensor index, Tensor update) -> Tensor"
_OUT_SCHEMA = (
    "kv_cache_update.out(Tensor cache, int dim, Tensor index, Tensor update, *, Tensor(a!) out)"
    " -> Tensor(a!)"
)

_lib = torch.library.Library("tte", "FRAGMENT")  # noqa: TOR901 - a namespace shared with others
_lib.define(_SCHEMA)
_lib.define(_OUT_SCHEMA)


def _check_meta(cache: torch.Tensor, dim: int, index: torch.Tensor, update: torch.Tensor) -> int:
    """Shape/dtype rules of §3 that need no data; returns `dim` normalised to [0, rank)."""
    rank = cache.dim()
    if not -rank <= dim < rank:
        raise OutOfRange(f"tte::kv_cache_update: dim {dim} is out of range for a rank-{rank} cache")
    d = dim % rank
    if update.dim() != rank:
        raise UsageError(
            f"tte::kv_cache_update: update has rank {update.dim()}, cache has rank {rank}")
    if update.dtype != cache.dtype:
        raise UsageError(
            f"tte::kv_cache_update: update dtype {update.dtype} != cache dtype {cache.dtype}")
    for i in range(rank):
        if i != d and update.shape[i] != cache.shape[i]:
            raise UsageError(
                f"tte::kv_cache_update: update shape {list(update.shape)} differs from cache "
                f"shape {list(cache.shape)} at dim {i} (only dim {d} may differ)")
    if index.dtype != torch.int64 or index.dim() != 1:
        raise UsageError(
            f"tte::kv_cache_update: index must be a 1-D int64 tensor, got {index.dtype} "
            f"of rank {index.dim()}")
    if index.shape[0] != update.shape[d]:
        raise UsageError(
            f"tte::kv_cache_update: index has {index.shape[0]} entries, update has "
            f"{update.shape[d]} positions along dim {d}")
    return d


def _check_bounds(cache: torch.Tensor, d: int, index: torch.Tensor) -> None:
    size = cache.shape[d]
    for i, v in enumerate(index.tolist()):
        if not 0 <= v < size:
            raise OutOfRange(
                f"tte::kv_cache_update: index[{i}] = {v} is outside [0, {size}) along dim {d}")


def _functional(cache, dim, index, update):
    d = _check_meta(cache, dim, index, update)
    _check_bounds(cache, d, index)
    return cache.index_copy(d, index, update)


def _out(cache, dim, index, update, *, out):
    d = _check_meta(cache, dim, index, update)
    if out.shape != cache.shape or out.dtype != cache.dtype:
        raise UsageError(
            f"tte::kv_cache_update.out: out is {out.dtype} {list(out.shape)}, cache is "
            f"{cache.dtype} {list(cache.shape)}")
    _check_bounds(cache, d, index)
    if out.data_ptr() != cache.data_ptr():
        out.copy_(cache)
    out.index_copy_(d, index, update)  # in place: only the indexed rows are written
    return out


def _functional_fake(cache, dim, index, update):
    _check_meta(cache, dim, index, update)
    return torch.empty_like(cache)


def _out_fake(cache, dim, index, update, *, out):
    _check_meta(cache, dim, index, update)
    return out


_lib.impl("kv_cache_update", _functional, "CompositeExplicitAutograd")
_lib.impl("kv_cache_update.out", _out, "CompositeExplicitAutograd")
torch.library.register_fake("tte::kv_cache_update", _functional_fake, lib=_lib)
torch.library.register_fake("tte::kv_cache_update.out", _out_fake, lib=_lib)

OP = torch.ops.tte.kv_cache_update.default
OUT_OP = torch.ops.tte.kv_cache_update.out


def kv_cache_update(cache: torch.Tensor, dim: int, index: torch.Tensor,
                    update: torch.Tensor) -> torch.Tensor:
    """Functional KV write: `cache` with `update` written at `index` along `dim` (§3)."""
    return OP(cache, dim, index, update)
