"""`GraphRecord`: a graph as it was at one moment, rebuildable after passes rewrote it in place.

Invariant: `GraphRecord.of(graph).rebuild(root)` is a GraphModule whose graph has the same nodes
(op, target, arguments, name, type, meta) in the same order, with the same calling convention, as
`graph` had when recorded — whatever was done to `graph` since (nodes rewritten or erased,
attributes such as constant-folded parameters deleted from its module). Recording copies no
node, tensor or module — one tuple of references per node (and a shallow copy of its meta) —
so it is cheap enough to take on every compile; the graph is rebuilt only when asked.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import Graph, GraphModule, Node
from torch.fx.node import map_arg


@dataclass(frozen=True)
class GraphRecord:
    nodes: tuple[tuple[Any, ...], ...]   # (node, op, target, args, kwargs, name, type, meta)
    codegen: Any

    @classmethod
    def of(cls, graph: Graph) -> GraphRecord:
        # fx keeps args/kwargs immutable (a rewrite replaces them), so references are enough
        return cls(tuple((n, n.op, n.target, n.args, n.kwargs, n.name, n.type, dict(n.meta))
                         for n in graph.nodes), graph._codegen)

    def rebuild(self, root: torch.nn.Module) -> GraphModule:
        """The recorded graph in a new GraphModule over `root`'s attributes (every `get_attr`
        and `call_module` target must still be on `root`)."""
        graph = Graph()
        env: dict = {}
        for node, op, target, args, kwargs, name, type_, meta in self.nodes:
            new: Node = graph.create_node(op, target, map_arg(args, env.__getitem__),
                                          map_arg(kwargs, env.__getitem__), name, type_)
            new.meta = dict(meta)
            env[node] = new
        graph._codegen = self.codegen
        return GraphModule(root, graph)
