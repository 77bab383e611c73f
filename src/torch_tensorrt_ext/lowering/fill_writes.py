"""A tensor-valued `fill_` into a buffer, made a `copy_` of its value broadcast to the buffer.

torch-tensorrt 2.14.0's lowering turns `buf.fill_(v)` with a 0-d tensor `v` (functionalized to
`fill.Tensor(buf, v)`) into `v` itself: the broadcast to the buffer's shape is lost, so the
buffer's new value, and any output read from it, comes out 0-d (a `[1, 8]` buffer returned as
`[]`; a slice of it fails compile with a ZeroDivisionError in `normalize_negative_slice_stop`).

Invariant: `expand_fill_values(gm)` rewrites, in place and in every graph of `gm`
(`subgraphs.graphs`: a higher-order op's body too), every `aten.fill_.Tensor(buf, v)` whose
value's shape differs from the buffer's static shape into `aten.copy_(buf, aten.expand(v,
shape))` — the same values and dtype conversion (`copy_` converts as `fill_` does) — and changes
nothing else; it returns how many it rewrote (with `apply=False` it only counts them).
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule

from .subgraphs import graphs

__all__ = ["expand_fill_values"]


def expand_fill_values(gm: GraphModule, apply: bool = True) -> int:
    return sum(_expand(g, apply) for g in graphs(gm))


def _expand(gm: GraphModule, apply: bool) -> int:
    changed = 0
    for n in gm.graph.find_nodes(op="call_function", target=torch.ops.aten.fill_.Tensor):
        buf, value = n.args[:2]
        bval = getattr(buf, "meta", {}).get("val")
        vval = getattr(value, "meta", {}).get("val")
        if bval is None or vval is None or tuple(vval.shape) == tuple(bval.shape) or \
                not all(isinstance(d, int) for d in bval.shape):
            continue
        changed += 1
        if not apply:
            continue
        shape = [int(d) for d in bval.shape]
        with gm.graph.inserting_before(n):
            wide = gm.graph.call_function(torch.ops.aten.expand.default, (value, shape))
        mode = getattr(vval, "fake_mode", None)
        if mode is not None:
            with mode:
                wide.meta["val"] = vval.expand(shape)
        n.target = torch.ops.aten.copy_.default
        n.args = (buf, wide)
    if changed and apply:
        gm.graph.lint()
        gm.recompile()
    return changed
