"""The ExecuTorch backend config a stateful program needs, and the edge manager that applies it.

Invariant: `backend_config` returns the caller's config (or the default) plus exactly what state
needs — initial values of the mutable buffers serialized (exact placeholder names), their FQNs
emitted, no host→device staging of state an engine writes itself, and one allocation per buffer
shared by every method where ExecuTorch can share it (a warning naming the buffers where it
cannot); applying it to a config it produced changes nothing. `stateful_edge`'s manager applies
it on every `to_executorch`.
"""
from __future__ import annotations

import copy

from typing import Dict, List, Set

from executorch.exir.pass_base import ExportPass
from torch.export import ExportedProgram

from . import device_state
from .kept_mutations import check_writes, expected_writes, written_in_place
from .tensorrt_blob import DEVICE_SPEC

__all__ = ["backend_config", "stateful_edge", "InitialiseMutableBuffers",
           "mutable_buffer_placeholders", "written_in_place"]


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


def mutable_buffer_placeholders(ep: ExportedProgram) -> Set[str]:
    sig = ep.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    return {name for name, fqn in sig.inputs_to_buffers.items() if fqn in mutated}


def backend_config(edge_manager, config=None, share_across_methods=None):
    """The caller's `ExecutorchBackendConfig` (or the default) plus what state needs: initial
    values of the mutable buffers serialized, their FQNs emitted, no host→device staging of state
    an engine writes itself, and
    (several methods) one allocation per buffer shared by every method, as in eager, where
    ExecuTorch can share it (`_share_state_across_methods`).
    Applying it to a config it already produced changes nothing."""
    from executorch.exir import ExecutorchBackendConfig

    if getattr(config, "_tte_state", False):
        return config
    # a copy, and a copy of its planner: the caller's config is not changed, and a default
    # config's planner is one instance shared by every default ExecutorchBackendConfig (a
    # dataclass default), so setting share_mutable_buffers on it would reach every later save
    config = copy.copy(config) if config is not None else ExecutorchBackendConfig()
    config.memory_planning_pass = copy.copy(config.memory_planning_pass)
    names: Set[str] = set()
    on_device: Set[str] = set()
    for method in edge_manager.methods:
        names |= mutable_buffer_placeholders(edge_manager.exported_program(method))
        on_device |= written_in_place(edge_manager.exported_program(method))
    if share_across_methods is None:
        _share_state_across_methods(edge_manager, config.memory_planning_pass)
    config.passes = [*list(config.passes or ()), InitialiseMutableBuffers(names)]
    config.emit_mutable_buffer_names = True
    # state an engine writes itself stays in the engine's memory; state ExecuTorch's write-back
    # copies (a host kernel) keeps its host staging, so that copy can reach it
    config.to_out_var_pass = device_state.StateOnDevicePass(on_device, config.to_out_var_pass)
    config._tte_state = True
    return config


def _device_delegates(edge_manager) -> bool:
    for method in edge_manager.methods:
        gm = edge_manager.exported_program(method).graph_module
        for _, sub in gm.named_children():
            for spec in getattr(sub, "compile_specs", ()) or ():
                if spec.key == DEVICE_SPEC and spec.value.decode() != "cpu":
                    return True
    return False


def _share_state_across_methods(edge_manager, planner) -> None:
    """A buffer one method writes and others use shares one allocation, like eager's one module.
    ExecuTorch 1.5.1 shares mutable buffers only when every tensor lives in its default memory
    (mem_id 1); with device delegates (state in device memory) it cannot, so each method keeps its
    own copy — said in a warning naming the buffers, never silently."""
    methods = list(edge_manager.methods)
    if len(methods) < 2 or not getattr(planner, "alloc_mutable_buffers", False):
        return
    used: Dict[str, List[str]] = {}
    written = set()
    for m in methods:
        sig = edge_manager.exported_program(m).graph_signature
        written |= set(sig.buffers_to_mutate.values())
        for fqn in set(sig.inputs_to_buffers.values()):
            used.setdefault(fqn, []).append(m)
    shared = {f: ms for f, ms in used.items() if f in written and len(ms) > 1}
    if not shared:
        return
    if not _device_delegates(edge_manager):
        planner.share_mutable_buffers = True
        return
    import warnings
    warnings.warn(
        "buffers shared by several methods "
        f"({', '.join(f'{f!r}: {ms}' for f, ms in sorted(shared.items()))}) "
        "live in device memory, where ExecuTorch 1.5.1 cannot share mutable buffers between "
        "methods (MemoryPlanningPass share_mutable_buffers needs mem_id 1): each method keeps "
        "its own copy of them. Export them as one method, or copy the state between methods "
        "in the application.", UserWarning, stacklevel=3)


def stateful_edge(edge_manager):
    """The `EdgeProgramManager` torch-tensorrt's `executorch.export` returns, whose
    `to_executorch(config)` always adds `backend_config` — so a caller lowering several methods
    themselves gets initialised, named, unstaged state like `torch_tensorrt.save` does, and a
    declared buffer write lost in ExecuTorch's lowering fails it (`kept_mutations`)."""
    from executorch.exir import EdgeProgramManager

    class StatefulEdgeProgramManager(type(edge_manager)):
        def to_executorch(self, config=None):
            expected = expected_writes(self)
            lowered = super().to_executorch(backend_config(self, config))
            check_writes(lowered, expected)
            return lowered

    assert isinstance(edge_manager, EdgeProgramManager)
    edge_manager.__class__ = StatefulEdgeProgramManager
    return edge_manager
