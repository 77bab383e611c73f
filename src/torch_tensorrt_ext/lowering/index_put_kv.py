"""`index_put` KV writes in the form the `IKVCacheUpdateLayer` converters accept.

`cache[:, :, pos] = new` (ExecuTorch's default llama cache) is `aten.index_put(cache,
[None, None, pos], new)` in the functional graph; torch-tensorrt's converters only turn
`index_copy` (one position along dim 2) and `slice_scatter` (concrete bounds along dim 2) into an
aliased KV update layer.

Invariant: `kv_form(node)` describes the equivalent converter form of an index_put, or says why
there is none, without touching the graph; `rewrite(node, form)` replaces the node by that form
and the result equals eager `index_put` for every position eager accepts:

* one runtime position `pos` (a 1-element integer index) → `index_copy(cache, 2,
  remainder(pos, s_max), new)` (the remainder reproduces index_put's negative indexing);
* a contiguous run known at export (`arange(start, end)` with integer bounds) →
  `slice_scatter(cache, new, 2, start, end)`.

Values are expanded to the written region's shape when index_put would broadcast them. Only
`accumulate=False` writes of a static 4-D cache, indexed on dim 2 alone, qualify.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

import torch
from torch.fx import Node

from ..contracts.shape_text import shape_text

aten = torch.ops.aten
INDEX_PUT = aten.index_put.default
_ARANGES = (aten.arange.default, aten.arange.start, aten.arange.start_step)


@dataclass(frozen=True)
class KVForm:
    """The converter form of an index_put: `index_copy` of `positions` (a node) or
    `slice_scatter` of [start, end); `values` expanded to `region` when shapes differ."""

    op: str                       # "index_copy" or "slice_scatter"
    values: Node
    region: tuple[int, ...]       # [b, d, n, h] written
    positions: Node | None = None
    start: int = 0
    end: int = 0


def _shape(node: object) -> tuple[object, ...] | None:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def _static_run(index: Node) -> tuple[int, int] | None:
    """[start, end) when `index` is `arange` with integer bounds and step 1."""
    if index.target not in _ARANGES:
        return None
    args = list(index.args)
    if index.target is aten.arange.default:
        args = [0] + args
    start, end, step = (args + [1])[:3]
    if all(isinstance(v, int) for v in (start, end, step)) and step == 1 and end > start:
        return start, end
    return None


def kv_form(node: Node, cache_shape: Sequence[object]) -> KVForm | str:
    """The converter form of `node` (an `aten.index_put`), or the reason there is none."""
    args = list(node.args) + [None] * (4 - len(node.args))
    _cache, indices, values, accumulate = args[:4]
    accumulate = node.kwargs.get("accumulate", accumulate)
    if accumulate:
        return "index_put with accumulate=True adds into the cache; no KV form"
    if len(cache_shape) != 4 or not all(isinstance(s, int) for s in cache_shape):
        return (f"index_put into a cache of shape {shape_text(cache_shape)}; the KV form needs a "
                "static 4-D [b,d,s_max,h] cache")
    indices = list(indices or ())
    if not (3 <= len(indices) <= 4 and indices[0] is None and indices[1] is None
            and isinstance(indices[2], Node) and (len(indices) == 3 or indices[3] is None)):
        return ("index_put does not index dim 2 alone (cache[:, :, pos] = new); no KV form")
    index = indices[2]
    val = index.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype not in (torch.int64, torch.int32) \
            or val.dim() != 1 or not isinstance(val.shape[0], int):
        return (f"index {index.name!r} is not a 1-D integer tensor of static length; "
                "no KV form")
    b, d, _, h = cache_shape
    n = val.shape[0]
    region = (b, d, n, h)
    vshape = _shape(values)
    if vshape is None:
        return f"values {getattr(values, 'name', values)!r} have no meta['val']; no KV form"
    try:
        if tuple(torch.broadcast_shapes(vshape, region)) != region:
            return f"values {list(vshape)} do not broadcast to the region {list(region)}"
    except RuntimeError:
        return f"values {list(vshape)} do not broadcast to the region {list(region)}"
    run = _static_run(index)
    if run is not None:
        start, end = run
        if end > cache_shape[2]:
            return f"index_put positions [{start}:{end}) exceed s_max {cache_shape[2]}"
        return KVForm("slice_scatter", values, region, start=start, end=end)
    if n != 1:
        return (f"index_put of {n} runtime positions; only one position (or an arange with "
                "integer bounds) has a KV form")
    return KVForm("index_copy", values, region, positions=index)


def describe(form: KVForm) -> str:
    if form.op == "slice_scatter":
        return f"index_put of positions [{form.start}:{form.end}) rewritten to slice_scatter"
    return "index_put of one position rewritten to index_copy"


def rewrite(node: Node, form: KVForm) -> Node:
    """Replace `node` by its converter form; returns the new node (meta['val'] kept)."""
    graph = node.graph
    cache = node.args[0]
    s_max = cache.meta["val"].shape[2]
    with graph.inserting_before(node):
        values = form.values
        if _shape(values) != form.region:
            values = graph.call_function(aten.expand.default, (values, list(form.region)))
            values.meta["val"] = form.values.meta["val"].expand(form.region)
        if form.op == "slice_scatter":
            new = graph.call_function(aten.slice_scatter.default,
                                      (cache, values, 2, form.start, form.end, 1))
        else:
            pos = graph.call_function(aten.remainder.Scalar, (form.positions, s_max))
            pos.meta["val"] = form.positions.meta["val"].clone()
            new = graph.call_function(aten.index_copy.default, (cache, 2, pos, values))
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    graph.erase_node(node)
    return new
