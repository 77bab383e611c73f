"""Lower declared programs to a `.pte`: partition engines, keep state above, initialise buffers.

Invariant: every mutable buffer of the emitted program carries its registered initial value (so
the first call starts from it, KV and copy-back alike) and its fully qualified name (so traffic
can be attributed per buffer); buffers shared by several methods share one allocation when asked.
`save_pte` never leaves a partly written `.pte` at its destination.
"""
from __future__ import annotations

from typing import Mapping, Optional, Set, Union

import torch
from executorch.exir import (EdgeCompileConfig, ExecutorchBackendConfig,
                             to_edge_transform_and_lower)
from executorch.exir.pass_base import ExportPass
from executorch.exir.passes import MemoryPlanningPass

from . import backend  # noqa: F401  (registers TensorRTBackend for to_backend)
from .device_state import StateOnDevicePass
from .partitioner import EnginePartitioner
from .pte_write import write_atomic

Programs = Union[torch.export.ExportedProgram, Mapping[str, torch.export.ExportedProgram]]


class InitialiseMutableBuffers(ExportPass):
    """Mark exactly the named buffer placeholders to be serialised with their initial value.

    (ExecuTorch's own InitializedMutableBufferPass matches by substring, so a pattern "k" would
    also initialise "k_cache_scale"; this pass takes exact placeholder names.)"""

    def __init__(self, names: Set[str]):
        super().__init__()
        self.names = set(names)

    def placeholder(self, name, arg, meta):
        if name in self.names:
            meta["et_init_buffer"] = True
        return super().placeholder(name, arg, meta)


def _mutable_buffer_placeholders(ep: torch.export.ExportedProgram) -> Set[str]:
    sig = ep.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    return {name for name, fqn in sig.inputs_to_buffers.items() if fqn in mutated}


def to_executorch(programs: Programs, *, device: str = "cpu", share_mutable_buffers: bool = False):
    """`ExecutorchProgramManager` for one program or a `{method: program}` mapping."""
    edge = to_edge_transform_and_lower(
        programs, partitioner=[EnginePartitioner(device)],
        compile_config=EdgeCompileConfig(_check_ir_validity=False))
    names: Set[str] = set()
    for method in edge.methods:
        names |= _mutable_buffer_placeholders(edge.exported_program(method))
    config = ExecutorchBackendConfig(
        passes=[InitialiseMutableBuffers(names)],
        emit_mutable_buffer_names=True,
        memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=share_mutable_buffers),
    )
    if device != "cpu":  # the state lives on the device: no per-call staging of buffers
        config.to_out_var_pass = StateOnDevicePass(names, config.to_out_var_pass)
    return edge.to_executorch(config)


def save_pte(programs: Programs, path: str, **kw) -> str:
    """Lower `programs` and write the `.pte` to `path` all or nothing (`pte_write`): a failure
    while writing (a full disk, an error in serialisation) leaves `path` as it was."""
    et = to_executorch(programs, **kw)
    write_atomic(path, et.write_to_file)
    return path
