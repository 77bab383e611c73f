"""A `torch.cond`'s result copied out of the branches' memory before another control-flow op runs.

ExecuTorch 1.5.1 emits a `cond` by inlining both branches; each branch ends with a `MoveCall`
that hands the branch's own output EValue on to the cond's result — the result then *is* the
branch's tensor, whose memory lies in the arena every control-flow submodule shares (memory
planning reserves one region at the bottom of the arena for the submodules of all cond / map /
scan ops, each planned from offset 0, and plans the cond's result a slot of its own above it that
the move leaves unused). The next control-flow op's branch or body computes into that same region,
so a cond's result read after it — a buffer's write-back, a later op, a method output — holds the
later op's values (`cd0.copy_(cond(...))`, then a second cond, wrote the second cond's value
into `cd0`). ExecuTorch alone does the same (two conds whose first result is
returned: both outputs hold the second's value).

`CopyBranchResults` runs first in the edge-to-ExecuTorch passes: each result of a `cond` that is
read by or after a later control-flow op of the same graph is cloned right after the cond (a
top-level value of its own, planned above the shared region), and those readers read the clone;
readers before the next control-flow op keep reading the result (no copy where none is needed).
Graphs of branches and loop bodies are treated the same way.

Invariant: after the pass, no node of any graph reads a `cond`'s result at or after the next
control-flow op of that graph; every value computed is unchanged (the clone equals the result).
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

__all__ = ["CopyBranchResults", "CONTROL_FLOW"]

_hop = torch.ops.higher_order
# the ops whose submodules ExecuTorch plans into the one shared region (memory_planning's
# _apply_algo_to_submodules)
CONTROL_FLOW = frozenset({_hop.cond, _hop.map_impl, _hop.scan, _hop.while_loop})


class CopyBranchResults(PassBase):
    """`clone_op`: the edge op that copies a tensor (`aten.clone`, or `_clone_dim_order` where
    the program uses dim-order ops)."""

    def __init__(self, clone_op):
        super().__init__()
        self.clone_op = clone_op

    def call(self, graph_module: GraphModule) -> PassResult:
        changed = self._graph(graph_module)
        if changed:
            graph_module.recompile()
        return PassResult(graph_module, changed)

    def _graph(self, gm: GraphModule) -> bool:
        nodes = list(gm.graph.nodes)
        order = {n: k for k, n in enumerate(nodes)}
        changed = False
        for k, node in enumerate(nodes):
            if node.op == "call_function" and node.target in CONTROL_FLOW:
                for sub in node.args:   # each branch or body, every one of them
                    if isinstance(sub, Node) and sub.op == "get_attr" and \
                            isinstance(getattr(gm, sub.target), GraphModule):
                        changed |= self._graph(getattr(gm, sub.target))
            if node.op != "call_function" or node.target is not _hop.cond:
                continue
            later = next((order[n] for n in nodes[k + 1:] if n.op == "call_function"
                          and n.target in CONTROL_FLOW), None)
            if later is not None:
                changed |= self._copy_results(gm, node, order, later)
        return changed

    def _copy_results(self, gm: GraphModule, cond: Node, order: dict[Node, int],
                      later: int) -> bool:
        """Clone each result of `cond` read at position `later` or after; those readers read
        the clone, made right after the cond (its getitems moved there first: a getitem emits
        no instruction, the clone must come before the later op)."""
        changed = False
        results = sorted((u for u in cond.users if u.op == "call_function"),   # its getitems
                         key=order.__getitem__, reverse=True)
        for result in results:
            cond.append(result)
        last = results[0] if results else cond
        for result in reversed(results):
            late = [u for u in result.users if order[u] >= later]
            if not late:
                continue
            with gm.graph.inserting_after(last):
                copy = gm.graph.call_function(self.clone_op, (result,))
            copy.meta = {k: v for k, v in result.meta.items() if k != "spec"}
            for user in late:
                user.replace_input_with(result, copy)
            last, changed = copy, True
        return changed
