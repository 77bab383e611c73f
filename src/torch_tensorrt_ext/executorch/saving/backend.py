"""`TensorRTBackend.preprocess`: one engine call → one delegate blob (TR03).

Invariant: a reference engine's partition becomes a TR03 blob of its signature's metadata and
its payload; a torch-tensorrt engine's partition is handed to `tensorrt_blob` (ExecuTorch finds
backends by class name, and this class shares upstream's, so it serves both kinds and `.pte`
files are interchangeable). Delegate I/O follows `delegate_io`'s invariant.
"""
from __future__ import annotations

import copy
import dataclasses

import torch
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec

from ...contracts import blob as blobfmt
from ...contracts.engine_call import (ENGINE_ARG, SIGNATURE_ARG, WEIGHTS_ARG, Signature,
                                      is_reference_call, is_tensorrt_call)
from ...contracts.plan import PlanError
from ...contracts.target_device import parse_target_device
from . import tensorrt_blob
from .tensorrt_blob import EXTERNAL_DATA_SPEC, tensor_bytes
from .named_data import named_data
from ...engines.weights import mismatch
from .delegate_io import delegate_input_bindings, delegate_output_bindings, single_engine_call

BACKEND_ID = "TensorRTBackend"


def _constant(ep: torch.export.ExportedProgram, node: torch.fx.Node) -> torch.Tensor:
    """The tensor an engine call's payload or weight argument holds (a constant of the
    partition)."""
    sig = ep.graph_signature
    target = sig.inputs_to_lifted_tensor_constants.get(node.name)
    tensor = ep.constants.get(target) if target is not None else None
    if tensor is None and node.name in sig.inputs_to_buffers:  # a legacy exporter's buffer
        tensor = ep.state_dict.get(sig.inputs_to_buffers[node.name])
    if tensor is None:
        raise PlanError(f"engine payload or weight {node.name!r} is not a constant of the "
                        "partition")
    return tensor.detach().cpu()


def _reference_result(name: str, meta: blobfmt.BlobMetadata, program: torch.Tensor,
                      weights: list[torch.Tensor], external: str | None) -> PreprocessResult:
    """The blob holds the program; its weights become the program's named data (the compiled
    module's own tensors, not copies), each checked against its `WeightRef`."""
    wrong = mismatch(name, meta.weights, weights)
    if wrong is not None:
        raise PlanError(wrong)
    store = named_data([(r.key, tensor_bytes(w)) for r, w in zip(meta.weights, weights,
                                                                  strict=True)], external)
    return PreprocessResult(processed_bytes=blobfmt.serialize(meta, tensor_bytes(program)),
                            data_store_output=store if meta.weights else None)


def program_for_preprocess(edge_program: torch.export.ExportedProgram
                           ) -> torch.export.ExportedProgram:
    """ExecuTorch's isolated copy of a partition for `preprocess`: everything deep-copied (the
    graph, its signature) except the tensors, which are shared. `preprocess` only reads them,
    and ExecuTorch's default deep copy would hold a second copy of every engine payload and
    weight (as large as the model) while the blob is written."""
    shared = list(edge_program.state_dict.values()) + list(edge_program.constants.values())
    memo = {id(t): t for t in shared if isinstance(t, torch.Tensor)}
    return copy.deepcopy(edge_program, memo)


class TensorRTBackend(BackendDetails):
    @classmethod
    def copy_exported_program_for_preprocess(cls, edge_program: torch.export.ExportedProgram,
                                             compile_specs: list[CompileSpec]):
        return program_for_preprocess(edge_program)

    @staticmethod
    def preprocess(edge_program: torch.export.ExportedProgram,
                   compile_specs: list[CompileSpec]) -> PreprocessResult:
        if any(is_tensorrt_call(n) for n in edge_program.graph_module.graph.nodes):
            return tensorrt_blob.preprocess(edge_program, compile_specs)
        call = single_engine_call(edge_program, is_reference_call)
        esig = Signature.parse(call.args[SIGNATURE_ARG])
        meta = esig.metadata
        delegate_inputs = delegate_input_bindings(edge_program, call, list(meta.input_names))
        delegate_outputs = delegate_output_bindings(edge_program, call, list(meta.output_names))
        specs = {s.key: s.value for s in compile_specs}
        device = specs.get(tensorrt_blob.DEVICE_SPEC, b"cpu").decode()
        device_id = parse_target_device(device)[1] or 0
        meta = dataclasses.replace(meta, delegate_inputs=tuple(delegate_inputs),
                                   delegate_outputs=tuple(delegate_outputs), device_id=device_id)
        external = specs.get(EXTERNAL_DATA_SPEC)
        weights = [_constant(edge_program, w) for w in call.args[WEIGHTS_ARG]]
        return _reference_result(esig.name, meta, _constant(edge_program, call.args[ENGINE_ARG]),
                                 weights, external.decode() if external else None)
