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

A rewrite names what it changes as sites: a `Site` is (the graph's path in `gm` — "" for `gm`'s
own graph, else the attribute path `gm.named_modules()` gives its graph module — and a node's
name, unique in its graph). `copied` keeps both, so a site found on a program names the same node
in its copy. `sites_in(gm, pick)` is the site of each node `pick` returns for each graph of `gm`
(read only); `edit_sites(gm, sites, change)` resolves every site to its node first, then calls
`change(graph_module, node)` for each in order, then lints and recompiles each graph it changed,
and touches no other graph.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator

from torch.fx import GraphModule, Node

__all__ = ["Site", "copied", "edit_sites", "graphs", "sites_in"]

Site = tuple[str, str]   # (graph path in the graph module, "" for its own graph; node name)


def graphs(gm: GraphModule) -> Iterator[GraphModule]:
    return (m for m in gm.modules() if isinstance(m, GraphModule))   # modules() yields each once


def _named_graphs(gm: GraphModule) -> Iterator[tuple[str, GraphModule]]:
    return ((p, m) for p, m in gm.named_modules() if isinstance(m, GraphModule))   # as graphs()


def sites_in(gm: GraphModule, pick: Callable[[GraphModule], Iterable[Node]]) -> tuple[Site, ...]:
    return tuple((path, n.name) for path, g in _named_graphs(gm) for n in pick(g))


def edit_sites(gm: GraphModule, sites: Iterable[Site],
               change: Callable[[GraphModule, Node], None]) -> None:
    by_graph: dict[str, list[str]] = {}
    for path, name in sites:
        by_graph.setdefault(path, []).append(name)
    resolved = []
    for path, names in by_graph.items():
        g = gm.get_submodule(path) if path else gm
        nodes = {n.name: n for n in g.graph.nodes}
        resolved.append((g, [nodes[name] for name in names]))
    for g, nodes in resolved:
        for n in nodes:
            change(g, n)
        g.graph.lint()
        g.recompile()


def copied(gm: GraphModule) -> GraphModule:
    # Graph.__deepcopy__ copies nodes with shallow-copied meta (fx's own node_copy)
    new = GraphModule(gm, copy.deepcopy(gm.graph), class_name=type(gm).__name__)
    new.meta = dict(gm.meta)
    for name, child in list(new.named_children()):
        if isinstance(child, GraphModule):
            setattr(new, name, copied(child))
    new.recompile()
    return new
