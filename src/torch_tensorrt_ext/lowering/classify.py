"""`plan_mutations`: every buffer the program mutates, classified KV_ALIAS or COPY_BACK.

Invariant: the plan names exactly the buffers eager execution mutates (one entry each, found by
`graph_writes`), and an entry is KV_ALIAS only when `kv_rules` proves the converters will emit an
aliased `IKVCacheUpdateLayer`; everything else is COPY_BACK with its reason. Nothing is dropped.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch.fx import GraphModule, Node

from ..contracts.plan import BufferWrite, MutationPlan, WriteKind
from .graph_writes import FoundWrite, Program, find_buffer_writes
from .kv_rules import kv_verdict, op_name_of, static_shape, writer_op


def _normalize_ops(ops: Iterable[object]) -> frozenset:
    """torch_executed_ops as both OpOverloads and 'aten.x.default' strings."""
    out = set()
    for op in ops:
        out.add(op)
        if isinstance(op, str):
            name = op[len("torch.ops."):] if op.startswith("torch.ops.") else op
            out.add(name)
            if name.count(".") == 1:  # "aten.add" means aten.add.default too
                out.add(name + ".default")
        elif hasattr(op, "_schema"):
            out.add(op_name_of(op))
        elif hasattr(op, "overloads"):  # an OpOverloadPacket: every overload of it
            out |= _normalize_ops(getattr(op, name) for name in op.overloads())
    return frozenset(out)


def _cache_shape(program: Program, root: Node):
    shape = static_shape(root)
    if shape is None and isinstance(program, GraphModule) and root.op == "get_attr":
        shape = tuple(program.get_buffer(root.target).shape)
    return shape


def plan_mutations(program: torch.export.ExportedProgram | GraphModule, *,
                   torch_executed_ops: Iterable[object] = ()) -> MutationPlan:
    """Plan every buffer write of an ExportedProgram or GraphModule from torch.export.

    `torch_executed_ops` (op overloads or names such as "aten.index_copy.default") are the ops
    left to PyTorch; their writes are COPY_BACK. An ExportedProgram in training IR is
    functionalized once (`graph_writes.functional_form`); lifting it afterwards reuses that.
    """
    analysed, found = find_buffer_writes(program)
    return plan_writes(analysed, found, torch_executed_ops=torch_executed_ops)


def plan_writes(analysed: Program, found: Sequence[FoundWrite], *,
                torch_executed_ops: Iterable[object] = ()) -> MutationPlan:
    """The plan of writes `find_buffer_writes` already found in `analysed` (for a caller that
    goes on to lift the same writes without looking for them again)."""
    excluded = _normalize_ops(torch_executed_ops)
    return MutationPlan(tuple(_classify(analysed, w, excluded) for w in found))


def _classify(analysed: Program, w: FoundWrite, excluded: frozenset) -> BufferWrite:
    verdict = kv_verdict(w.value, w.root, _cache_shape(analysed, w.root), excluded)
    reason = verdict.reason
    if w.lifted_as:
        held = ("a tensor held outside any registered buffer" if w.lifted_as == (w.fqn,)
                else "the memory of this registered buffer, reached through a plain Python "
                     "object")
        reason = (f"module state lifted by torch.export as constant "
                  f"{', '.join(repr(c) for c in w.lifted_as)} ({held}), planned as buffer "
                  f"{w.fqn!r}; {reason}")
    return BufferWrite(fqn=w.fqn, kind=WriteKind.KV_ALIAS if verdict.kv else WriteKind.COPY_BACK,
                       op=writer_op(w.value), reason=reason, node=w.value.name)
