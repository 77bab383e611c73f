"""A scatter-add along a dynamic length made the same accumulation as an `index_put`, which
torch-tensorrt lowers without unrolling it.

torch-tensorrt 2.14.0 decomposes `scatter_add` and `scatter_reduce` with a Python loop over the
source's scatter dimension (one `scatter` per position). For a dimension sized by a symbol (a
prefill's length) the loop specializes the symbol to the example's size: the program silently
stops being dynamic, and a reference engine refuses its binding ("engine binding 'pos' has
dimension 0 = 4; a reference engine takes dynamic dimensions that are one symbol each").

Invariant: `dynamic_scatter_sites(gm)` changes nothing and names (`subgraphs.Site`), in every
graph of `gm` (`subgraphs.graphs`), each `aten.scatter_add` / `scatter_add_` and each
`aten.scatter_reduce.two` / `scatter_reduce_.two` with `reduce="sum"` and `include_self=True`
whose index has a symbolic size; another reduction (`prod`, `mean`, `amax`, `amin`, or a sum
without the input) over an index of symbolic size is refused there (`Unsupported`, naming the
node) rather than left to be specialized. `accumulate_dynamic_scatters(gm, sites)` rewrites, in
place, exactly the scatters `sites` names into `aten.index_put` / `index_put_` of the same input
with `accumulate=True`, indexed at `index` along the scatter dimension and at every position (an
`arange`) along each other one, from the source narrowed to the index's shape — the values
`scatter_add` defines (up to the order in which floating-point additions are made, as for
`scatter_add` itself), the in-place form still in place; it changes nothing else. A scatter
whose sizes are all static is no site: it is left to torch-tensorrt (its loop is exact there).
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..errors import Unsupported
from .subgraphs import Site, edit_sites, sites_in

__all__ = ["accumulate_dynamic_scatters", "dynamic_scatter_sites"]

_aten = torch.ops.aten
# scatter op -> the index_put of the same form (functional / in place)
_AS_INDEX_PUT = {_aten.scatter_add.default: _aten.index_put.default,
                 _aten.scatter_add_.default: _aten.index_put_.default,
                 _aten.scatter_reduce.two: _aten.index_put.default,
                 _aten.scatter_reduce_.two: _aten.index_put_.default}


def dynamic_scatter_sites(gm: GraphModule) -> tuple[Site, ...]:
    return sites_in(gm, lambda g: [n for op in _AS_INDEX_PUT
                                   for n in g.graph.find_nodes(op="call_function", target=op)
                                   if _dynamic_sum(n)])


def accumulate_dynamic_scatters(gm: GraphModule, sites: tuple[Site, ...]) -> None:
    edit_sites(gm, sites, _as_index_put)


def _val(a):
    return a.meta.get("val") if isinstance(a, Node) else None


def _dynamic_sum(n: Node) -> bool:
    """A scatter-add (or sum scatter_reduce including the input) with a symbolic index size;
    another reduction with one is refused (torch-tensorrt would fix the length)."""
    x, dim, index, src = n.args[:4]
    ival = _val(index)
    if not (isinstance(dim, int) and isinstance(ival, torch.Tensor) and
            isinstance(_val(x), torch.Tensor) and isinstance(_val(src), torch.Tensor) and
            any(isinstance(s, torch.SymInt) for s in ival.shape)):
        return False
    if n.target in (_aten.scatter_reduce.two, _aten.scatter_reduce_.two):
        reduce = n.args[4] if len(n.args) > 4 else n.kwargs.get("reduce")
        include_self = n.kwargs.get("include_self", True)
        if reduce != "sum" or include_self is False:
            raise Unsupported(
                f"node {n.name!r}: scatter_reduce(reduce={reduce!r}, include_self="
                f"{include_self}) over an index of dynamic size {list(ival.shape)}: "
                "torch-tensorrt 2.14.0 unrolls scatter_reduce over the index's length, which "
                "fixes the length to the example's; only a sum including the input is "
                "rewritten (as an accumulating index_put). Export this write with a static "
                "length, or write it as a sum (scatter_add_)")
    return True


def _as_index_put(gm: GraphModule, n: Node) -> None:
    graph = gm.graph
    x, dim, index, src = n.args[:4]
    ival, sval = _val(index), _val(src)
    rank = ival.dim()
    dim = dim % max(rank, 1)
    mode = getattr(ival, "fake_mode", None)

    def call(target, args, kwargs=None, make=None):
        node = graph.call_function(target, args, kwargs or {})
        if mode is not None and make is not None:
            with mode:
                node.meta["val"] = make()
        return node

    def size_of(k):   # the index's size along k: an int, or read from the index
        if not isinstance(ival.shape[k], torch.SymInt):
            return int(ival.shape[k])
        size = graph.call_function(_aten.sym_size.int, (index, k))
        size.meta["val"] = ival.shape[k]
        return size

    with graph.inserting_before(n):
        indices = []
        for k in range(rank):
            if k == dim:
                indices.append(index)
                continue
            at = call(_aten.arange.default, (size_of(k),), {"dtype": torch.int64,
                                                            "device": ival.device},
                      lambda k=k: torch.arange(ival.shape[k], device=ival.device))
            shape = [1] * rank
            shape[k] = -1
            indices.append(call(_aten.view.default, (at, shape),
                                make=lambda at=at, shape=shape: at.meta["val"].view(shape)))
        for k in range(rank):   # the source as far as the index reaches
            if not statically_known_true(sval.shape[k] == ival.shape[k]):
                prev = src
                src = call(_aten.slice.Tensor, (src, k, 0, size_of(k)),
                           make=lambda p=prev, k=k: _val(p).narrow(k, 0, ival.shape[k]))
    n.target = _AS_INDEX_PUT[n.target]
    n.args = (x, indices, src, True)
    n.kwargs = {}
