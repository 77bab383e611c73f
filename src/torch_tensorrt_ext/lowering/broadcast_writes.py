"""A write whose value broadcasts or converts into its destination, made a `copy_` of the value
already of the destination's shape and dtype.

`buf.copy_(src)` broadcasts `src` to `buf`'s shape and converts it to `buf`'s dtype; so does
`buf.fill_(v)` with a 0-d tensor `v`. Functionalization loses both: torch.export's
`run_decompositions` (which torch-tensorrt's compile and ExecuTorch's `to_edge` both call) ends
with `_remove_unnecessary_copy_op_pass`, which makes the source of a buffer's trailing
`aten.copy(buf, src)` the buffer's new value as it is, and torch-tensorrt 2.14.0's lowering turns
`fill.Tensor(buf, v)` into `v`. A `[1, D]` (or 0-d) value copied into a `[4, D]` buffer then
leaves as the buffer's new value `[1, D]`: a read of the buffer after the write in the same call
(`buf.sum(0)`) computes on the narrow value — wrong numbers, no error — or fails to compile
(`buf[1]`: "index 1 out of range"); a float value copied into a bf16 buffer is read back as
float. The buffer's state itself is right (its write-back `copy_` broadcasts), its reads are not.

Invariant: `broadcast_write_sites(gm)` changes nothing and names (`subgraphs.Site`), in every
graph of `gm` (`subgraphs.graphs`: a higher-order op's body too), every `aten.copy_(dst, src)` and
`aten.fill_.Tensor(dst, src)` whose source's shape or dtype differs from its destination's static
ones. `broadcast_write_values(gm, sites)` rewrites, in place, exactly the writes `sites` names
into `aten.copy_(dst, aten.expand(src', dst.shape))`, `src'` being `src` converted to `dst`'s
dtype (`_to_copy`) where they differ — the same values the write stores (`copy_` converts as
`fill_` does) — and changes nothing else. A write whose value already has its destination's
shape and dtype (the common case) is no site.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from .subgraphs import Site, edit_sites, sites_in

__all__ = ["broadcast_write_sites", "broadcast_write_values"]

_WRITES = (torch.ops.aten.copy_.default, torch.ops.aten.fill_.Tensor)


def _widens(n: Node) -> bool:
    dst, src = n.args[:2]
    dval = getattr(dst, "meta", {}).get("val")
    sval = getattr(src, "meta", {}).get("val")
    return isinstance(dval, torch.Tensor) and isinstance(sval, torch.Tensor) and \
        all(isinstance(d, int) for d in dval.shape) and \
        (tuple(sval.shape) != tuple(dval.shape) or sval.dtype != dval.dtype)


def broadcast_write_sites(gm: GraphModule) -> tuple[Site, ...]:
    return sites_in(gm, lambda g: [n for t in _WRITES
                                   for n in g.graph.find_nodes(op="call_function", target=t)
                                   if _widens(n)])


def broadcast_write_values(gm: GraphModule, sites: tuple[Site, ...]) -> None:
    def change(g: GraphModule, n: Node) -> None:
        dst, src = n.args[:2]
        _rewrite(g, n, dst, src, dst.meta["val"], src.meta["val"])
    edit_sites(gm, sites, change)


def _rewrite(gm: GraphModule, n: Node, dst: Node, src: Node, dval, sval) -> None:
    """`n` becomes `copy_(dst, expand(src converted to dst's dtype, dst's shape))`."""
    shape = [int(d) for d in dval.shape]
    with gm.graph.inserting_before(n):
        if sval.dtype != dval.dtype:
            src = _node(gm, torch.ops.aten._to_copy.default, (src,), {"dtype": dval.dtype},
                        lambda: sval.to(dval.dtype))
            sval = src.meta.get("val", sval.to(dval.dtype))
        if tuple(sval.shape) != tuple(shape):
            src = _node(gm, torch.ops.aten.expand.default, (src, shape), {},
                        lambda: sval.expand(shape))
    n.target = torch.ops.aten.copy_.default
    n.args = (dst, src, *n.args[2:])   # fill_.Tensor has no more; copy_'s non_blocking kept


def _node(gm: GraphModule, target, args: tuple, kwargs: dict, val) -> Node:
    node = gm.graph.call_function(target, args, kwargs)
    mode = getattr(args[0].meta.get("val"), "fake_mode", None)
    if mode is not None:
        with mode:
            node.meta["val"] = val()
    return node
