"""`EnginePartitioner`: delegate each `tte::execute_engine` call to `TensorRTBackend`.

Invariant: one delegate per engine call — the call, its `getitem`s and its payload constant carry
one tag; every buffer stays above the delegate (untagged), so ExecuTorch keeps mutable state in
the caller's memory and hands it to the delegate as an argument, never freezing it into the
blob. The delegation spec carries the target device as a compile spec (accelerators only).
"""
from __future__ import annotations

import operator
from typing import Dict

import torch
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import (DelegationSpec, Partitioner,
                                                 PartitionResult)

BACKEND_ID = "TensorRTBackend"


def is_engine_call(node: torch.fx.Node) -> bool:
    """A `tte::execute_engine` call, as an ATen or an edge-dialect op."""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    return schema is not None and schema.name == "tte::execute_engine"


class EnginePartitioner(Partitioner):
    def __init__(self, device: str = "cpu"):
        self.device = device
        super().__init__()

    def compile_specs(self):
        """The target-device spec, for an accelerator only: ExecuTorch stages every delegate
        argument through `et_copy._h2d_copy` when a delegate names a device, which on a CPU
        delegate would copy each buffer on every call for nothing."""
        if self.device == "cpu":
            return []
        return [CompileSpec("target_device", self.device.encode())]

    def partition(self, exported_program: torch.export.ExportedProgram) -> PartitionResult:
        spec = DelegationSpec(BACKEND_ID, self.compile_specs())
        tags: Dict[str, DelegationSpec] = {}
        sig = exported_program.graph_signature
        constants = set(sig.inputs_to_lifted_tensor_constants)
        for i, node in enumerate(n for n in exported_program.graph.nodes if is_engine_call(n)):
            tag = f"tte_engine_{i}"
            tags[tag] = spec
            node.meta["delegation_tag"] = tag
            for user in node.users:
                if user.target is operator.getitem:
                    user.meta["delegation_tag"] = tag
            payload = node.args[1]
            if payload.op != "placeholder" or payload.name not in constants:
                raise ValueError(f"engine call {node.name!r}: its payload {payload.name!r} is not "
                                 "a lifted constant of the program")
            if len(payload.users) != 1:
                raise ValueError(f"engine payload {payload.name!r} is shared by several calls")
            payload.meta["delegation_tag"] = tag
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)
