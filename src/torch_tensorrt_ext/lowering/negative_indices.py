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

Invariant: `normalize_select_scatter(gm)` rewrites, in every graph of `gm`, each
`aten.select.int` and `aten.select_scatter` whose index is a negative int and whose dimension
has a static size into the same select at `index + size`, in place (the same values), and every
`aten.slice.Tensor` with a negative or out-of-range bound into the same slice with bounds in
[0, size], and changes nothing else; it returns how many it rewrote. With `apply=False` it only
counts them (and changes nothing).
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule

from .subgraphs import graphs

__all__ = ["normalize_select_scatter"]

# op -> position of its index argument (its input is argument 0, its dim the one before)
_INDEX_AT = {torch.ops.aten.select.int: 2, torch.ops.aten.select_scatter.default: 3}


def normalize_select_scatter(gm: GraphModule, apply: bool = True) -> int:
    return sum(_normalize(g, apply) for g in graphs(gm))


def _normalize(gm: GraphModule, apply: bool) -> int:
    changed = 0
    for op, at in _INDEX_AT.items():
        for n in gm.graph.find_nodes(op="call_function", target=op):
            if len(n.args) <= at:
                continue
            dim, index = n.args[at - 1], n.args[at]
            val = getattr(n.args[0], "meta", {}).get("val")
            if not isinstance(index, int) or index >= 0 or not isinstance(dim, int) or \
                    val is None or not isinstance(val.shape[dim], int):
                continue
            if apply:
                args = list(n.args)
                args[at] = index + val.shape[dim]
                n.args = tuple(args)
            changed += 1
    changed += _normalize_slices(gm, apply)
    if changed and apply:
        gm.recompile()
    return changed


def _normalize_slices(gm: GraphModule, apply: bool) -> int:
    """`slice.Tensor(x, dim, start, end)` with a negative start or end, or an end past the
    dimension (`buf[..., -1:] = v` is `slice(buf, 2, -1, 2**63 - 1)`), as the same slice with
    bounds in [0, size]: torch-tensorrt's slice_scatter converter cannot build the write of a
    negative start (TensorRT-RTX compile fails broadcasting its indices)."""
    changed = 0
    for n in gm.graph.find_nodes(op="call_function", target=torch.ops.aten.slice.Tensor):
        val = getattr(n.args[0], "meta", {}).get("val")
        dim = n.args[1] if len(n.args) > 1 else 0
        if val is None or not isinstance(dim, int) or not isinstance(val.shape[dim], int):
            continue
        size = val.shape[dim]
        args = list(n.args) + [None] * (4 - len(n.args))
        new = list(args)
        for k in (2, 3):
            b = args[k]
            if isinstance(b, int) and not isinstance(b, bool):
                new[k] = min(max(b + size if b < 0 else b, 0), size)
        if new != args and all(isinstance(b, int) for b in new[2:4]):
            if apply:
                n.args = tuple(new[:max(len(n.args), 4)])
            changed += 1
    return changed
