"""`TensorRTBackend.preprocess`: one engine call → one delegate blob (TR03).

Invariant: the blob's `delegate_inputs` name, for each delegate argument in order, the engine
input binding it feeds, and `delegate_outputs` name the engine output bindings the delegate
returns — which must be in engine binding order (a `getitem(engine, k)` per output with `k`
strictly increasing); anything else is refused with the bindings named. The class name is the
backend id, the same as upstream's, so `.pte` files are interchangeable.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import List

import torch
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec

from ..engines.execute_op import Signature
from . import blob as blobfmt
from ..export.engine_calls import is_reference_call as is_engine_call

BACKEND_ID = "TensorRTBackend"


def _engine_call(ep: torch.export.ExportedProgram) -> torch.fx.Node:
    calls = [n for n in ep.graph.nodes if is_engine_call(n)]
    if len(calls) != 1:
        raise blobfmt.BlobError(f"a TensorRTBackend partition holds exactly one engine call, "
                                f"found {len(calls)}")
    return calls[0]


def delegate_output_bindings(ep: torch.export.ExportedProgram, call: torch.fx.Node,
                             names: List[str]) -> List[str]:
    """The engine output bindings the partition returns; refuse an order other than the engine's."""
    out = []
    last = -1
    for v in ep.graph.output_node().args[0]:
        if not (isinstance(v, torch.fx.Node) and v.target is operator.getitem
                and v.args[0] is call):
            raise blobfmt.BlobError(f"delegate output {getattr(v, 'name', v)!r} is not an output "
                                    "binding of its engine")
        k = v.args[1]
        if k <= last:
            raise blobfmt.BlobError(
                f"delegate outputs are not in engine binding order: {names[k]!r} (binding {k}) "
                f"comes after {names[last]!r} (binding {last})")
        last = k
        out.append(names[k])
    return out


def delegate_input_bindings(ep: torch.export.ExportedProgram, call: torch.fx.Node,
                            names: List[str]) -> List[str]:
    """For each delegate input (the partition's user inputs, in order) the engine input binding
    it feeds; a value feeding two bindings, or an input feeding none, is refused."""
    feeds = {}
    for i, arg in enumerate(call.args[0]):
        if arg in feeds:
            raise blobfmt.BlobError(f"engine call {call.name!r}: one value feeds input bindings "
                                    f"{feeds[arg]!r} and {names[i]!r}")
        feeds[arg] = names[i]
    user = set(ep.graph_signature.user_inputs)
    out = []
    for ph in (n for n in ep.graph.nodes if n.op == "placeholder" and n.name in user):
        if ph not in feeds:
            raise blobfmt.BlobError(f"delegate input {ph.name!r} feeds no binding of engine call "
                                    f"{call.name!r}")
        out.append(feeds[ph])
    return out


def _payload(ep: torch.export.ExportedProgram, node: torch.fx.Node) -> bytes:
    sig = ep.graph_signature
    target = sig.inputs_to_lifted_tensor_constants.get(node.name)
    tensor = ep.constants.get(target) if target is not None else None
    if tensor is None and node.name in sig.inputs_to_buffers:  # a legacy exporter's buffer
        tensor = ep.state_dict.get(sig.inputs_to_buffers[node.name])
    if tensor is None:
        raise blobfmt.BlobError(f"engine payload {node.name!r} is not a constant of the partition")
    return tensor.contiguous().numpy().tobytes()


def _is_tensorrt_call(node: torch.fx.Node) -> bool:
    from ..export.engine_calls import TRT_OPS, _schema_name
    return _schema_name(node) in TRT_OPS


class TensorRTBackend(BackendDetails):
    @staticmethod
    def preprocess(edge_program: torch.export.ExportedProgram,
                   compile_specs: List[CompileSpec]) -> PreprocessResult:
        if any(_is_tensorrt_call(n) for n in edge_program.graph.nodes):
            # a torch-tensorrt engine: ExecuTorch finds backends by class name, and this class
            # shares upstream's, so it serves torch-tensorrt's partitions the same way
            from ..seams.executorch import preprocess as tensorrt_preprocess
            return tensorrt_preprocess(edge_program, compile_specs)
        call = _engine_call(edge_program)
        esig = Signature.parse(call.args[2])
        meta = esig.metadata
        delegate_inputs = delegate_input_bindings(edge_program, call, list(meta.input_names))
        delegate_outputs = delegate_output_bindings(edge_program, call, list(meta.output_names))
        device = {s.key: s.value for s in compile_specs}.get("target_device", b"cpu").decode()
        device_id = int(device.split(":")[1]) if ":" in device else 0
        meta = dataclasses.replace(meta, delegate_inputs=tuple(delegate_inputs),
                                   delegate_outputs=tuple(delegate_outputs), device_id=device_id)
        return PreprocessResult(processed_bytes=blobfmt.serialize(meta, _payload(
            edge_program, call.args[1])))
