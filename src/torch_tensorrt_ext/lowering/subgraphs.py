"""Every graph of a graph module — its own and each higher-order op's body — and a copy of them
all to edit.

torch.export's training IR keeps a higher-order op's body (a `torch.autocast` block, a `cond`
branch, a `no_grad` block until `grad_blocks` inlines it) as a graph module of its own, held as
an attribute of the graph calling it. A rewrite that must reach every node walks `graphs(gm)`.

Invariant: `graphs(gm)` yields `gm` first, then each `GraphModule` below it (depth-first, each
once). `copied(gm)` is a new `GraphModule` whose own graph, and that of each graph module held
as an attribute of one (where torch.export keeps a higher-order op's body), is a new `Graph`
with new nodes — the same targets, arguments and `meta` values (shallow: the fake tensors are
shared; no rewrite edits them) — and whose other attributes are `gm`'s own: editing the copy's
graphs leaves every graph of `gm` as it was.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator

from torch.fx import GraphModule

__all__ = ["copied", "graphs"]


def graphs(gm: GraphModule) -> Iterator[GraphModule]:
    return (m for m in gm.modules() if isinstance(m, GraphModule))   # modules() yields each once


def copied(gm: GraphModule) -> GraphModule:
    # Graph.__deepcopy__ copies nodes with shallow-copied meta (fx's own node_copy)
    new = GraphModule(gm, copy.deepcopy(gm.graph), class_name=type(gm).__name__)
    new.meta = dict(gm.meta)
    for name, child in list(new.named_children()):
        if isinstance(child, GraphModule):
            setattr(new, name, copied(child))
    new.recompile()
    return new
