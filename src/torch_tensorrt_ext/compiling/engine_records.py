"""The engines a compile built, as records: which call_module targets are engines, one
`EngineInfo` per engine call (`engine_infos`, the one builder for a compiled module), and the
copies written into an engine's own record (`record_copy`, read back by `copy_record`;
both the engine-module protocol's, `engines.engine_module`).

Invariant: an `EngineInfo` built here carries every field its engine reports — kind, bindings,
aliased pairs, the copies recorded in it — with its buffer bindings resolved by FQN; a copy is
recorded at most once per output, refused naming the engine otherwise.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from torch.fx import GraphModule, Node

from ..contracts.engine import AliasedIO, EngineInfo
from ..contracts.plan import PlanError
from ..engines import engine_module
from ..engines.engine_module import record_copy
from ..lowering import LiftedGraph


def engine_modules(trt_gm: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """call_module targets that are engines (they report binding names)."""
    return {name: m for name, m in trt_gm.named_children()
            if engine_module.is_engine_module(m)}


def _output_of(call: Node, k: int, n_outputs: int) -> Node | None:
    if n_outputs == 1:
        return call
    for u in call.users:
        if u.target is operator.getitem and u.args[1] == k:
            return u
    return None


def engine_infos(trt_gm: GraphModule, lifted: LiftedGraph) -> tuple[EngineInfo, ...]:
    """What each built engine reports — its kind, bindings, aliased pairs and the copies recorded
    in it — with its buffer bindings resolved by name (the one builder of a compiled module's
    `EngineInfo`s; `StatefulCompile.finish` keeps them on the module as `engine_infos`)."""
    graph = trt_gm.graph
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    fqn_of_ph = {placeholders[p]: f for f, p in lifted.buffer_inputs if p in placeholders}
    outs = list(graph.output_node().args[0])
    fqn_of_value: dict[Node, list[str]] = {}
    for fqn, idx in lifted.buffer_outputs:
        fqn_of_value.setdefault(outs[idx], []).append(fqn)
    modules = engine_modules(trt_gm)
    infos = []
    for call in graph.nodes:
        if call.op != "call_module" or call.target not in modules:
            continue
        m = modules[call.target]
        ins, outs_b = tuple(m.input_binding_names), tuple(m.output_binding_names)
        if len(call.args) != len(ins):
            raise PlanError(f"engine {call.target!r} takes {len(call.args)} arguments but has "
                            f"{len(ins)} input bindings {list(ins)}")
        in_buf = tuple((ins[i], fqn_of_ph[a]) for i, a in enumerate(call.args) if a in fqn_of_ph)
        out_buf = []
        for k, name in enumerate(outs_b):
            node = _output_of(call, k, len(outs_b))
            out_buf.extend((name, f) for f in fqn_of_value.get(node, ()))
        aliased = tuple(AliasedIO(o, i, kind) for o, (i, kind) in (m.aliased_io or {}).items())
        infos.append(EngineInfo(name=str(call.target), input_names=ins, output_names=outs_b,
                                aliased_io=aliased, input_buffers=in_buf,
                                output_buffers=tuple(out_buf),
                                kind=engine_module.kind(m),
                                copy_back=engine_module.copy_record(m)))
    return tuple(infos)


def engines_are_side_effects(gm: GraphModule) -> None:
    """An engine writes state (in place, or its own copy-back) even when no output of it is read:
    neither fx's dead-code elimination nor an export may drop its call."""
    for module in engine_modules(gm).values():
        module._is_impure = True
    for name in ("execute_engine", "no_op_placeholder_for_execute_engine"):
        op = getattr(getattr(torch.ops, "tensorrt", None), name, None)
        if op is not None:
            torch.fx.node.has_side_effect(op.default)


def bind_reference_buffers(trt_gm: GraphModule, infos: Sequence[EngineInfo]) -> None:
    """Reference engines carry their buffers' FQNs in their own record (TensorRT engines get
    them from the ExecuTorch partitioner)."""
    modules = engine_modules(trt_gm)
    for info in infos:
        bind = getattr(modules.get(info.name), "bind_buffers", None)
        if bind is not None:
            bind(info.input_buffers)


__all__ = ["engine_modules", "engine_infos", "record_copy",
           "bind_reference_buffers", "engines_are_side_effects"]
