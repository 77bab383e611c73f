"""A functional `copy` into a view of dynamic size, in a partition exported with its dynamic
dimensions, made the broadcast of its source it computes.

A slice assignment at a start read from data (`cache[:, :, p:p + T] = k`, `narrow(2, p,
T).copy_(k)`) reaches a partition functionalized as `copy(slice(cache, 2, p, p + T), k)` and
then the write of that value. The partition's export (`payload.to_executorch_program`) re-runs
`copy`'s meta function, which asks whether the destination view overlaps itself: for a length
`T` that is a `Dim` it cannot decide that over the whole range (`IsNonOverlappingAndDense(...,
T, ...)`), and the export fails ("Constraints violated (d0)! Not all values of d0 ... satisfy
the generated guard"). The value `copy(dst, src)` returns is `src` broadcast to `dst`'s shape
in `dst`'s dtype — `dst`'s old values are not read.

Invariant: `copies_as_broadcasts(gm)` rewrites each `aten.copy.default(dst, src)` whose
destination has a symbolic size into `aten.expand(src, dst's sizes)` (after `aten._to_copy` to
`dst`'s dtype where it differs) — the same values — and changes nothing else; it returns how
many it rewrote.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

__all__ = ["copies_as_broadcasts"]

_aten = torch.ops.aten


def copies_as_broadcasts(gm: GraphModule) -> int:
    graph = gm.graph
    changed = 0
    for n in list(graph.find_nodes(op="call_function", target=_aten.copy.default)):
        dst, src = n.args[:2]
        dval = dst.meta.get("val") if isinstance(dst, Node) else None
        sval = src.meta.get("val") if isinstance(src, Node) else None
        if not isinstance(dval, torch.Tensor) or not isinstance(sval, torch.Tensor) or \
                not any(isinstance(s, torch.SymInt) for s in dval.shape):
            continue
        with graph.inserting_before(n):
            value = src
            if sval.dtype != dval.dtype:
                value = graph.call_function(_aten._to_copy.default, (src,),
                                            {"dtype": dval.dtype})
                value.meta["val"] = sval.to(dval.dtype)
            sizes = [_size(graph, dst, k, s) for k, s in enumerate(dval.shape)]
            wide = graph.call_function(_aten.expand.default, (value, sizes))
        wide.meta["val"] = value.meta["val"].expand(dval.shape)
        n.replace_all_uses_with(wide)
        graph.erase_node(n)
        changed += 1
    if changed:
        graph.lint()
        gm.recompile()
    return changed


def _size(graph, dst: Node, k: int, s):
    if not isinstance(s, torch.SymInt):
        return int(s)
    size = graph.call_function(_aten.sym_size.int, (dst, k))
    size.meta["val"] = s
    return size
