"""Negative indices of `select` / `select_scatter` made non-negative before torch-tensorrt lowers
a graph.

torch-tensorrt 2.14.0 decomposes `select_scatter(x, src, dim, index)` into
`slice_scatter(x, src.unsqueeze(dim), dim, index, index + 1)`, which for `index == -1` is the
empty slice `[-1:0]` (ExecuTorch's kernel refuses it; a converter writes nothing), so a write to a
buffer's last row (`self.buf[-1].add_(...)`) is lost or fails.

A write through `self.buf[-1]` reaches that decomposition as a `select.int(buf, 0, -1)` view
written in place (training IR), which functionalization turns into the `select_scatter`.

A write can sit in a higher-order op's body (a `torch.autocast` block; `no_grad` blocks are
inlined before, `grad_blocks`): every graph of `gm` is rewritten (`subgraphs.graphs`).

Invariant: `negative_index_sites(gm)` changes nothing and names (`subgraphs.Site`), in every
graph of `gm`, each `aten.select.int` and `aten.select_scatter` whose index is a negative int and
whose dimension has a static size, and every `aten.slice.Tensor` with a negative or out-of-range
int bound on a dimension of static size. `normalize_select_scatter(gm, sites)` rewrites exactly
the nodes `sites` names, in place: a select into the same select at `index + size` (the same
values), a slice into the same slice with bounds in [0, size]; it changes nothing else.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from .subgraphs import Site, edit_sites, sites_in

__all__ = ["negative_index_sites", "normalize_select_scatter"]

# op -> position of its index argument (its input is argument 0, its dim the one before)
_INDEX_AT = {torch.ops.aten.select.int: 2, torch.ops.aten.select_scatter.default: 3}
_SLICE = torch.ops.aten.slice.Tensor


def negative_index_sites(gm: GraphModule) -> tuple[Site, ...]:
    return sites_in(gm, lambda g: [n for op in (*_INDEX_AT, _SLICE)
                                   for n in g.graph.find_nodes(op="call_function", target=op)
                                   if _normalized(n) is not None])


def normalize_select_scatter(gm: GraphModule, sites: tuple[Site, ...]) -> None:
    def change(_g: GraphModule, n: Node) -> None:
        n.args = _normalized(n)
    edit_sites(gm, sites, change)


def _normalized(n: Node) -> tuple | None:
    """`n`'s arguments with its index or bounds made non-negative, or None to leave it."""
    return _normalized_slice(n) if n.target is _SLICE else _normalized_select(n)


def _normalized_select(n: Node) -> tuple | None:
    at = _INDEX_AT[n.target]
    if len(n.args) <= at:
        return None
    dim, index = n.args[at - 1], n.args[at]
    val = getattr(n.args[0], "meta", {}).get("val")
    if not isinstance(index, int) or index >= 0 or not isinstance(dim, int) or \
            val is None or not isinstance(val.shape[dim], int):
        return None
    args = list(n.args)
    args[at] = index + val.shape[dim]
    return tuple(args)


def _normalized_slice(n: Node) -> tuple | None:
    """`slice.Tensor(x, dim, start, end)` with a negative start or end, or an end past the
    dimension (`buf[..., -1:] = v` is `slice(buf, 2, -1, 2**63 - 1)`), as the same slice with
    bounds in [0, size]: torch-tensorrt's slice_scatter converter cannot build the write of a
    negative start (TensorRT-RTX compile fails broadcasting its indices)."""
    val = getattr(n.args[0], "meta", {}).get("val")
    dim = n.args[1] if len(n.args) > 1 else 0
    if val is None or not isinstance(dim, int) or not isinstance(val.shape[dim], int):
        return None
    size = val.shape[dim]
    args = list(n.args) + [None] * (4 - len(n.args))
    new = list(args)
    for k in (2, 3):
        b = args[k]
        if isinstance(b, int) and not isinstance(b, bool):
            new[k] = min(max(b + size if b < 0 else b, 0), size)
    if new != args and all(isinstance(b, int) for b in new[2:4]):
        return tuple(new[:max(len(n.args), 4)])
    return None
