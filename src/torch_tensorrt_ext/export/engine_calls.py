"""The engine calls of an exported program, whichever compiler put them there.

Invariant: `engine_calls(ep)` returns one `EngineCall` per engine-call node of the program's
graph — this project's `tte::execute_engine`, torch-tensorrt's `tensorrt::execute_engine`, or its
serialized form `tensorrt::no_op_placeholder_for_execute_engine` — keyed by engine name, with
the binding names and the in-place outputs read from the engine's own record (its signature or
its serialized engine info), never from the graph's shape; `aliased_plan(ep)` turns those records
into the plan of the writes the engines perform themselves. The TensorRT forms are read without
TensorRT and without a device.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping

import torch
from torch.fx import Node

from torch.export.graph_signature import OutputKind

from ..contracts.engine_call import (  # noqa: F401  (re-exported: the predicates users need)
    Signature, is_engine_call, is_reference_call)
from ..contracts.plan import BufferWrite, MutationPlan, PlanError, WriteKind



@dataclass(frozen=True)
class EngineCall:
    """One engine call and the engine's own record of what it writes in place (`aliased`,
    `copied`): `aliased_plan` turns that record into a plan, and
    `export.declare` only cross-checks a plan against it."""

    node: Node
    name: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    aliased: Mapping[str, str]            # output binding -> input binding, written in place
    copied: frozenset[str] = frozenset()  # outputs the delegate runtime copies back itself
    copy_pairs: tuple[tuple[str, str], ...] = ()   # (output, input) of each copied output

    def argument(self, input_binding: str) -> object:
        return self.node.args[0][self.input_names.index(input_binding)]


def _tte_call(node: Node) -> EngineCall:
    sig = Signature.parse(node.args[2])
    meta = sig.metadata
    return EngineCall(node, sig.name, tuple(meta.input_names), tuple(meta.output_names),
                      {a.output: a.input for a in meta.aliased_io},
                      frozenset(c.output for c in meta.copy_back),
                      tuple((c.output, c.input) for c in meta.copy_back))


def _trt_call(ep: torch.export.ExportedProgram, node: Node) -> EngineCall:
    from torch_tensorrt.executorch.backend import _get_engine_info_for_node

    from ..engines.tensorrt_info import engine_info_from_serialized
    info = engine_info_from_serialized(_get_engine_info_for_node(ep, node, metadata_only=True))
    name = info.name[:-len("_engine")] if info.name.endswith("_engine") else info.name
    return EngineCall(node, name, info.input_names, info.output_names,
                      {a.output: a.input for a in info.aliased_io},
                      frozenset(o for o, _ in info.copy_back), tuple(info.copy_back))


def engine_calls(ep: torch.export.ExportedProgram) -> dict[str, EngineCall]:
    calls: dict[str, EngineCall] = {}
    for node in ep.graph.nodes:
        if not is_engine_call(node):
            continue
        call = _tte_call(node) if is_reference_call(node) else _trt_call(ep, node)
        if call.name in calls:
            raise PlanError(f"engine {call.name!r} is called twice ({calls[call.name].node.name} "
                            f"and {node.name}); one call per engine is supported")
        calls[call.name] = call
    return calls


def aliased_plan(ep: torch.export.ExportedProgram) -> MutationPlan:
    """One entry per buffer an engine of `ep` writes itself (Copier.ENGINE), read from the
    engines' own records — the one place they are read to decide a declaration: in place
    through an aliased output (KV_ALIAS), or by copying an output into it (COPY_BACK with
    `engine_copies`: a reference engine's `copy_back`, or a TensorRT engine's `tte_copy_back`
    record that `executorch.delegate_copies` wrote). Buffers already declared are left to their
    declaration; every other copy-back write reaches here declared on its value already."""
    buffers = ep.graph_signature.inputs_to_buffers
    writes = []
    for call in engine_calls(ep).values():
        in_place = {**{o: (i, WriteKind.KV_ALIAS) for o, i in call.aliased.items()},
                    **{o: (i, WriteKind.COPY_BACK) for o, i in call.copy_pairs}}
        for out, (inp, kind) in in_place.items():
            arg = call.argument(inp)
            fqn = buffers.get(getattr(arg, "name", None))
            if fqn is None:
                raise PlanError(
                    f"engine {call.name!r} writes output {out!r} in place through input {inp!r} "
                    f"({getattr(arg, 'name', arg)}), which is not a registered buffer: nothing "
                    "would keep the update. Register the cache with register_buffer.")
            how = "aliases" if kind is WriteKind.KV_ALIAS else "is copied back into"
            writes.append(BufferWrite(
                fqn, kind, "execute_engine", f"engine {call.name!r} writes it itself ({out!r} "
                f"{how} {inp!r})", engine=call.name, input_binding=inp, output_binding=out,
                engine_copies=kind is WriteKind.COPY_BACK))
    declared = {s.target for s in ep.graph_signature.output_specs
                if s.kind == OutputKind.BUFFER_MUTATION}
    return MutationPlan(tuple(w for w in writes if w.fqn not in declared))
