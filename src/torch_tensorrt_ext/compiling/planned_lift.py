"""Plan a compiled program's writes and lift them, once, in place (`plan_and_lift`), and the
marks the converters read: no aliasing of a copy-back write (`mark_copy_back`), and an
`index_copy` KV write whose positions were proven consecutive on the whole graph
(`kv_rules.mark_consecutive_writes`: once partitioned, its index may be an engine input).

Invariant: a KV write whose cache the program reads again after the write is planned copy-back
before lifting (`stale_kv`), so no second lift is needed; every cache write into a copy-back
buffer's input is marked so no converter aliases it; every buffer the program only reads is
lifted to an input too — a buffer is state, which another method of the same module may write,
so no engine holds a snapshot of it as a constant (parameters and constants still fold).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from torch.fx import GraphModule, Node

from ..contracts.plan import MutationPlan, WriteKind
from ..lowering import LiftedGraph
from ..lowering.classify import plan_writes
from ..lowering.graph_writes import FoundWrite, find_buffer_writes
from ..lowering.kv_rules import (INDEX_COPY, NO_KV_ALIAS_MARKER, SLICE_SCATTER,
                                  mark_consecutive_writes, old_value_read)
from ..lowering.lift import lift_writes, recompile_lazily
from ..lowering.lifted_graph import buffer_input_name, reclaim_name, row_major


def _lift_read_only(lifted: LiftedGraph) -> LiftedGraph:
    """Also lift the buffers this program only reads (state another method may write) to
    inputs after the others."""
    gm, graph = lifted.gm, lifted.gm.graph
    wanted = {f for f, _ in gm.named_buffers()} - {f for f, _ in lifted.buffer_inputs}
    reads: dict[str, list[Node]] = {}
    for n in graph.find_nodes(op="get_attr"):   # one pass, whatever the number of buffers
        if str(n.target) in wanted:
            reads.setdefault(str(n.target), []).append(n)
    if not reads:
        return lifted
    anchor = list(graph.find_nodes(op="placeholder"))[-1]
    inputs, initial = list(lifted.buffer_inputs), list(lifted.initial_values)
    live = {n.name for n in graph.nodes}
    for fqn in sorted(reads):
        name = buffer_input_name(fqn)
        reclaim_name(graph, name, live)   # module() used it for the placeholder it unlifted
        with graph.inserting_after(anchor):
            ph = graph.placeholder(name)
        live.add(ph.name)
        ph.meta.update(reads[fqn][0].meta)
        if "val" in ph.meta:
            ph.meta["val"] = row_major(ph.meta["val"])
        for r in reads[fqn]:
            r.replace_all_uses_with(ph)
            graph.erase_node(r)
        anchor = ph
        inputs.append((fqn, ph.name))
        initial.append((fqn, row_major(gm.get_buffer(fqn))))
    graph.lint()
    recompile_lazily(gm)
    return dataclasses.replace(lifted, buffer_inputs=tuple(inputs), initial_values=tuple(initial))


READS_OLD_CACHE = ("the program reads the cache's old value after writing it; an in-place "
                   "write would change what that read sees")


def _cache_writes(ph: Node) -> list[Node]:
    return [u for u in ph.users if u.target in (SLICE_SCATTER, INDEX_COPY) and u.args[0] is ph]


def plan_and_lift(gm: GraphModule, excluded: Sequence[object]) -> tuple[MutationPlan, LiftedGraph]:
    """Plan `gm`'s writes and lift them, in place and once (the writes are found once, for both).

    A KV write whose cache is read again after the write (the old value) is copied back —
    TensorRT would alias it, but an in-place update under a later read is not what eager
    computes; this is decided on the graph before lifting, so no second lift is needed. Every
    cache write into a copy-back buffer's input — not only the last — is marked so no converter
    aliases it: an intermediate `IKVCacheUpdateLayer` would write the buffer in place mid-engine
    while the plan copies its final value back."""
    analysed, found = find_buffer_writes(gm)
    plan = plan_writes(analysed, found, torch_executed_ops=excluded)
    if analysed is gm:   # else re-exported: lift_writes refuses a graph writing buffers in place
        plan = as_copy_back(plan, stale_kv(gm, found, plan))
    lifted = lift_writes(gm, found, plan)
    mark_copy_back(lifted, (w.fqn for w in plan.copy_back()))
    outs = lifted.gm.graph.output_node().args[0]
    mark_consecutive_writes(outs[lifted.output_of(w.fqn)] for w in plan.kv())
    return plan, _lift_read_only(lifted)


def stale_kv(gm: GraphModule, found: Sequence[FoundWrite], plan: MutationPlan) -> dict[str, str]:
    """KV writes whose cache is read after the write, with their copy-back reason, judged on the
    unlifted graph (the buffer's own trailing `copy_` is not a read)."""
    kv = plan.kv()
    if not kv:
        return {}
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    by_fqn = {w.fqn: w for w in found}
    stale = {}
    for entry in kv:
        w = by_fqn[entry.fqn]
        if old_value_read(w.root, w.value, order, ignore=(w.copy_node,)):
            stale[entry.fqn] = f"{entry.reason}, but {READS_OLD_CACHE}; copied back"
    return stale


def as_copy_back(plan: MutationPlan, reasons: dict[str, str]) -> MutationPlan:
    """`plan` with the writes `reasons` names made COPY_BACK for those reasons (one pass)."""
    if not reasons:
        return plan
    return dataclasses.replace(plan, writes=tuple(
        dataclasses.replace(w, kind=WriteKind.COPY_BACK, reason=reasons[w.fqn])
        if w.fqn in reasons else w for w in plan))


def mark_copy_back(lifted: LiftedGraph, fqns: Iterable[str]) -> None:
    """Mark each named buffer's new value and every cache write into its input
    `_trt_no_kv_alias` — what lifting it as COPY_BACK gives, on a graph already lifted."""
    graph = lifted.gm.graph
    nodes = {n.name: n for n in graph.find_nodes(op="placeholder")}
    outs = graph.output_node().args[0]
    for fqn in fqns:
        value = outs[lifted.output_of(fqn)]
        writes = _cache_writes(nodes[lifted.placeholder_of(fqn)])
        if isinstance(value, Node) and value.target in (SLICE_SCATTER, INDEX_COPY):
            writes.append(value)
        for write in writes:
            write.meta[NO_KV_ALIAS_MARKER] = True


__all__ = ["plan_and_lift", "stale_kv", "as_copy_back", "mark_copy_back",
           "READS_OLD_CACHE"]
