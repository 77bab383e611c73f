"""The engine calls of an exported program, whichever compiler put them there.

Invariant: `engine_calls(ep)` returns one `EngineCall` per engine-call node of the program's
graph — this project's `tte::execute_engine`, torch-tensorrt's `tensorrt::execute_engine`, or its
serialized form `tensorrt::no_op_placeholder_for_execute_engine` — keyed by engine name, with
the binding names and the in-place outputs read from the engine's own record (its signature or
its serialized engine info), never from the graph's shape. The TensorRT forms are read without
TensorRT and without a device.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, Mapping, Tuple

import torch
from torch.fx import Node

from ..contracts.engine_call import (  # noqa: F401  (re-exported: the predicates users need)
    Signature, is_engine_call, is_reference_call)
from ..contracts.plan import PlanError



@dataclass(frozen=True)
class EngineCall:
    """One engine call and the engine's own record of what it writes in place (`aliased`,
    `copied`): `seams.declare.aliased_plan` turns that record into a plan, and
    `export.declare` only cross-checks a plan against it."""

    node: Node
    name: str
    input_names: Tuple[str, ...]
    output_names: Tuple[str, ...]
    aliased: Mapping[str, str]            # output binding -> input binding, written in place
    copied: FrozenSet[str] = frozenset()  # outputs the delegate runtime copies back itself
    copy_pairs: Tuple[Tuple[str, str], ...] = ()   # (output, input) of each copied output

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
    from torch_tensorrt.dynamo.runtime._serialized_engine_layout import (
        ALIASED_IO_IDX, INPUT_BINDING_NAMES_IDX, NAME_IDX, OUTPUT_BINDING_NAMES_IDX)
    from torch_tensorrt.executorch.backend import _get_engine_info_for_node

    from ..engines.tensorrt_info import _aliased_io, _binding_names, _text
    info = _get_engine_info_for_node(ep, node, metadata_only=True)
    name = _text(info[NAME_IDX], node.name, NAME_IDX)
    name = name[:-len("_engine")] if name.endswith("_engine") else name
    ins = _binding_names(_text(info[INPUT_BINDING_NAMES_IDX], name, INPUT_BINDING_NAMES_IDX),
                         name, INPUT_BINDING_NAMES_IDX)
    outs = _binding_names(_text(info[OUTPUT_BINDING_NAMES_IDX], name, OUTPUT_BINDING_NAMES_IDX),
                          name, OUTPUT_BINDING_NAMES_IDX)
    aliased = {a.output: a.input for a in _aliased_io(_text(info[ALIASED_IO_IDX], name,
                                                            ALIASED_IO_IDX), name)}
    return EngineCall(node, name, ins, outs, aliased)


def engine_calls(ep: torch.export.ExportedProgram) -> Dict[str, EngineCall]:
    calls: Dict[str, EngineCall] = {}
    for node in ep.graph.nodes:
        if not is_engine_call(node):
            continue
        call = _tte_call(node) if is_reference_call(node) else _trt_call(ep, node)
        if call.name in calls:
            raise PlanError(f"engine {call.name!r} is called twice ({calls[call.name].node.name} "
                            f"and {node.name}); one call per engine is supported")
        calls[call.name] = call
    return calls
