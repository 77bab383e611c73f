"""Partition results no engine can return, computed by the program from ones it can.

torch-tensorrt's partitioner takes integer arithmetic over a partition's scalars and views of
its tensors into the partition with the ops around them, and makes them its results when a node
outside reads them. An engine's result is a tensor whose every dimension is a constant or one of
its inputs' dimensions: ExecuTorch Gemma 4's default cache hands its custom SDPA (which runs
outside any engine) `start + T` (an integer) and the caches' valid prefixes
`k_cache[:, :, :start + T]`, transposed (a size read from data), neither of which an engine
returns (the reference builder refused: "engine result 5 is the integer s70 + u5").

Invariant: after `host_results(parent)`, such a result of an accelerated partition
(`_run_on_acc*`), where it is computed from the partition's inputs and results it can return by
integer ops and views only, is computed by the parent instead: the partition returns the
view chain's base (a tensor of the shape the engine already computes, a cache after its write),
and the parent applies the same integer ops and views, node for node, to it and to the call's
arguments. Views in the parent alias the engine's result as they aliased the partition's tensor,
so every value read is the one the partition computed; nothing else changes. A result that is
not such a chain is left as it is (the builder refuses it, naming it). The program's facts
about each scalar the moved nodes read (`scalar_facts`) are asserted again in the parent — a
later export of the compiled module cannot size the views without them.
"""
from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node

from ..engines.dynamic_dims import carried_symbols, returnable
from ..lowering.scalar_facts import assert_program_facts

__all__ = ["host_results"]

aten = torch.ops.aten
_ACC = "_run_on_acc"
# views the program runs as ExecuTorch does any view (no kernel, no copy)
_VIEWS = {aten.slice.Tensor, aten.permute.default, aten.transpose.int, aten.unsqueeze.default,
          aten.squeeze.dim, aten.select.int, aten.alias.default, aten.narrow.default}
_INTS = {operator.add, operator.sub, operator.mul, operator.floordiv, aten.sym_size.int}


def _chain(out: Node, carried: set, base: dict) -> list[Node] | None:
    """The nodes that compute `out` from the partition's inputs and returnable tensors (added
    to `base`), in graph order; None when some node is neither an integer op nor a view."""
    seen: dict[Node, None] = {}
    stack = [out]
    while stack:
        n = stack.pop()
        if n in seen or n.op == "placeholder" or n in base:
            continue
        val = n.meta.get("val")
        if n is not out and isinstance(val, torch.Tensor) and returnable(val, carried):
            base[n] = None
            continue
        if n.op != "call_function" or n.target not in _VIEWS | _INTS or n.kwargs:
            return None
        seen[n] = None
        stack += [a for a in n.args if isinstance(a, Node)]
    order = {n: i for i, n in enumerate(out.graph.nodes)}
    return sorted(seen, key=order.__getitem__)


def _hoist(parent: GraphModule, call: Node, sub: GraphModule) -> list[Node]:
    """Move the partition's unreturnable results that are chains into `parent`; the parent's
    nodes made, in order (empty when nothing moved)."""
    out_node = sub.graph.output_node()
    outs = list(out_node.args[0])
    carried = carried_symbols(sub.graph.find_nodes(op="placeholder"))
    base: dict[Node, None] = {}
    chains = {}
    for k, o in enumerate(outs):
        if isinstance(o, Node) and not returnable(o.meta.get("val"), carried):
            chain = _chain(o, carried, base)
            if chain is not None:
                chains[k] = chain
    if not chains:
        return []
    readers: dict[int, list[Node]] = {}
    for use in call.users:
        readers.setdefault(use.args[1], []).append(use)
    phs = [n for n in sub.graph.nodes if n.op == "placeholder"]
    kept = [o for k, o in enumerate(outs) if k not in chains]
    new_outs = kept + [b for b in base if b not in kept]
    env = {ph: a for ph, a in zip(phs, call.args, strict=True)}
    made: list[Node] = []
    anchor = call
    for use in (u for _, uses in sorted(readers.items()) for u in uses):
        anchor.append(use)                   # the call's reads right after it, in order
        anchor = use
    for b in base:                           # one read per result (torch-tensorrt's exporter
        k = outs.index(b) if b in kept else None    # gives the call's reads its values in order)
        if k in readers:
            env[b] = readers[k][0]
            continue
        with parent.graph.inserting_after(anchor):
            anchor = parent.graph.call_function(operator.getitem, (call, new_outs.index(b)))
        anchor.meta["val"] = b.meta.get("val")
        env[b] = anchor
        made.append(anchor)
    moved = sorted({n for c in chains.values() for n in c},
                   key={n: i for i, n in enumerate(sub.graph.nodes)}.__getitem__)
    for n in moved:
        with parent.graph.inserting_after(anchor):
            anchor = parent.graph.node_copy(n, env.__getitem__)
        env[n] = anchor
        made.append(anchor)
    for k, o in enumerate(outs):          # the parent's reads of the old results
        for use in readers.get(k, ()):
            if k in chains:
                use.replace_all_uses_with(env[o])
                parent.graph.erase_node(use)
            else:
                use.args = (call, new_outs.index(o))
    out_node.args = (tuple(new_outs),)
    for n in reversed(moved):              # the partition's nodes only the moved results read
        if not n.users:
            sub.graph.erase_node(n)
    sub.graph.lint()
    sub.recompile()
    if "val" in call.meta:
        call.meta["val"] = tuple(o.meta.get("val") for o in new_outs)
    return made


def host_results(parent: GraphModule) -> None:
    """Move each accelerated partition's unreturnable integer and view results into `parent`
    (see the module's invariant)."""
    made: list[Node] = []
    for call in [n for n in parent.graph.nodes
                 if n.op == "call_module" and _ACC in str(n.target)]:
        sub = getattr(parent, call.target)
        outs = sub.graph.output_node().args[0] if isinstance(sub, GraphModule) else None
        if not isinstance(outs, (tuple, list)) or \
                any(u.target is not operator.getitem for u in call.users):
            continue
        made += _hoist(parent, call, sub)
    if made:
        assert_program_facts(parent.graph, made)
        parent.graph.lint()
        parent.recompile()
