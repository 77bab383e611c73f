"""The engine calls of an exported program, whichever compiler put them there.

Invariant: `engine_info(ep, node)` is the one reader of an engine call's own record — its
signature (`tte::execute_engine`) or its serialized engine info (torch-tensorrt's
`tensorrt::execute_engine` / `no_op_placeholder_for_execute_engine`, read through
`engine_record`, the one use of upstream's private reader) — and returns one `EngineInfo` with
every field the record holds (kind, bindings, aliased pairs, copy-back pairs, shapes, dtypes,
device). A record is decoded once per distinct record text, whichever stage asks (compile's
declaration, the save's hand-over to the delegates, the partitioner, the blob). `engine_calls(ep)`
returns one `EngineCall` per engine-call node keyed by engine name, never reading the graph's
shape; `aliased_plan(ep)` turns those records into the plan of the writes the engines perform
themselves. The TensorRT forms are read without TensorRT and without a device.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch.fx import Node

from torch.export.graph_signature import OutputKind

from ..contracts.engine import EngineInfo
from ..contracts.engine_call import (  # noqa: F401  (re-exported: the predicates users need)
    SIGNATURE_ARG, Signature, is_engine_call, is_reference_call)
from ..contracts.plan import BufferWrite, MutationPlan, PlanError, WriteKind
from ..errors import MissingDependency
from ..engines.tensorrt_info import engine_info_from_metadata, engine_info_from_serialized

__all__ = ["EngineCall", "engine_record", "engine_info", "engine_calls", "aliased_plan",
           "is_engine_call", "is_reference_call"]

_ENGINE_SLOT = 3   # torch-tensorrt's SerializedInfoIndex.ENGINE_IDX: bytes the reader never reads


def engine_record(ep: torch.export.ExportedProgram, node: Node,
                  metadata_only: bool = True) -> list:
    """torch-tensorrt's serialized engine info of a TensorRT engine call, as its ExecuTorch
    backend reads it (with the engine bytes only when `metadata_only` is False)."""
    try:
        from torch_tensorrt.executorch.backend import _get_engine_info_for_node
    except ImportError as e:
        raise MissingDependency(
            f"engine call {node.name!r}: its record (bindings, aliased buffers) is read with "
            f"torch_tensorrt.executorch.backend, which cannot be imported ({e}); install "
            "torch_tensorrt's [executorch] extra (pip install executorch): without it the "
            "engine's buffer writes cannot be declared, and none is skipped silently") from None
    return list(_get_engine_info_for_node(ep, node, metadata_only=metadata_only))


@functools.lru_cache(maxsize=64)
def _decoded(slots: tuple[str, ...]) -> EngineInfo:
    return engine_info_from_serialized(slots)


@functools.lru_cache(maxsize=256)
def _from_signature(text: str) -> EngineInfo:
    sig = Signature.parse(text)
    return engine_info_from_metadata(sig.metadata, name=sig.name)


def engine_info(ep: torch.export.ExportedProgram, node: Node,
                record: list | None = None) -> EngineInfo:
    """The engine call's own record as an `EngineInfo` (module docstring). `record`: its
    serialized engine info when the caller read it already (with the engine bytes)."""
    if is_reference_call(node):
        return _from_signature(node.args[SIGNATURE_ARG])
    raw = engine_record(ep, node) if record is None else record
    return _decoded(tuple("" if k == _ENGINE_SLOT else v.decode() if isinstance(v, bytes)
                          else str(v) for k, v in enumerate(raw)))


@dataclass(frozen=True)
class EngineCall:
    """One engine call and its engine's own record (`info`): `aliased_plan` turns that record
    into a plan, and `export.declare` only cross-checks a plan against it."""

    node: Node
    info: EngineInfo

    @property
    def name(self) -> str:
        """The engine's name as plans name it (a TensorRT engine's without `_engine`)."""
        n = self.info.name
        return n[:-len("_engine")] if self.info.kind != "reference" and n.endswith("_engine") \
            else n

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.info.input_names

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.info.output_names

    @property
    def aliased(self) -> dict[str, str]:
        """Output binding -> input binding it writes in place."""
        return {a.output: a.input for a in self.info.aliased_io}

    @property
    def copy_pairs(self) -> tuple[tuple[str, str], ...]:
        """(output, input) of each output the delegate copies into its input after the call."""
        return self.info.copy_back

    @property
    def copied(self) -> frozenset[str]:
        return frozenset(o for o, _ in self.info.copy_back)

    def argument(self, input_binding: str) -> object:
        return self.node.args[0][self.input_names.index(input_binding)]


def engine_calls(ep: torch.export.ExportedProgram) -> dict[str, EngineCall]:
    calls: dict[str, EngineCall] = {}
    for node in ep.graph_module.graph.nodes:
        if not is_engine_call(node):
            continue
        call = EngineCall(node, engine_info(ep, node))
        if call.name in calls:
            raise PlanError(f"engine {call.name!r} is called twice ({calls[call.name].node.name} "
                            f"and {node.name}); one call per engine is supported")
        calls[call.name] = call
    return calls


def aliased_plan(ep: torch.export.ExportedProgram) -> MutationPlan:
    """One entry per buffer an engine of `ep` writes itself (Copier.ENGINE), read from the
    engines' own records — the one place they are read to decide a declaration: in place
    through an aliased output (KV_ALIAS), or by copying an output into it (COPY_BACK with
    `engine_copies`: the call's `EngineInfo.copy_back`, the copy record compile wrote into the
    engine module, `engines.engine_module.record_copy`). Buffers already declared are left to
    their declaration; every other copy-back write reaches here declared on its value already."""
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
