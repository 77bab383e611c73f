"""The ExecuTorch backend config a stateful program needs, and the edge manager that applies it.

Invariant: `plan_state` returns, for one save, the caller's config (or the default) copied plus
exactly what state needs — initial values of the mutable buffers serialized (exact placeholder
names), their FQNs emitted, no host→device staging of state an engine writes itself, and one
allocation per buffer shared by every method, in memory of its own whenever the program has
several methods (ExecuTorch's sharing for host-only programs, `shared_arenas`'s where state lives
in device memory; there a buffer only read by an engine is resident too) — and one correction of
ExecuTorch 1.5.1's emitted programs, a `torch.cond` result read after a later control-flow op
copied out of the memory that op reuses first (`branch_results`: else a buffer written from it
gets the later op's values); beside the config, the save's facts (each method's declared writes,
whether the methods hold one state), handed to the checks as values — nothing rides on the
config. A config it already produced is refused rather than planned twice.
`StatefulEdgeProgramManager.to_executorch` plans once per call, lowers, then checks the emitted
program: each method's writes (`verify_writes`), and the methods against each other
(`program_state`).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from executorch.exir import EdgeProgramManager
from executorch.exir.pass_base import ExportPass
from torch.export import ExportedProgram

from . import device_state, shared_arenas
from .branch_results import CopyBranchResults
from .declared_writes import Writes, expected_writes
from ..inspecting.program_state import check_program_state, declared_uses
from ..inspecting.verify_writes import verify_writes
from .tensorrt_blob import DEVICE_SPEC

__all__ = ["StatePlan", "StatefulEdgeProgramManager", "plan_state",
           "stateful_edge", "InitialiseMutableBuffers", "mutable_buffer_placeholders"]


class InitialiseMutableBuffers(ExportPass):
    """Mark exactly the named buffer placeholders to be serialised with their initial value.

    (ExecuTorch's own InitializedMutableBufferPass matches by substring, so a pattern "k" would
    also initialise "k_cache_scale"; this pass takes exact placeholder names.)"""

    def __init__(self, names: set[str]):
        super().__init__()
        self.names = set(names)

    def placeholder(self, name, arg, meta):
        if name in self.names:
            meta["et_init_buffer"] = True
        return super().placeholder(name, arg, meta)


def mutable_buffer_placeholders(ep: ExportedProgram) -> set[str]:
    sig = ep.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    return {name for name, fqn in sig.inputs_to_buffers.items() if fqn in mutated}


@dataclass(frozen=True)
class StatePlan:
    """One save's plan: the config ExecuTorch lowers with, each method's declared writes (what
    `verify_writes` checks the emitted program against) and whether the methods hold one state
    (what `program_state` checks; False only where the caller asked each method to keep its own)."""

    config: object
    writes: dict[str, Writes]
    one_state: bool


def plan_state(edge_manager, config=None, share_across_methods=None) -> StatePlan:
    """The caller's `ExecutorchBackendConfig` (or the default) plus what state needs: initial
    values of the mutable buffers serialized, their FQNs emitted, no host→device staging of state
    an engine writes itself (each method's declared writes, `expected_writes`, read once here),
    and (several methods) one allocation per buffer shared by every method, as in eager
    (`_share_state_across_methods`); first of the edge passes, a cond's result read after a later
    control-flow op copied (`branch_results.CopyBranchResults`). A config this function already
    produced is refused (`UsageError`): planned twice, its passes would run twice."""
    from executorch.exir import ExecutorchBackendConfig

    from ...errors import UsageError
    if config is not None and any(isinstance(p, InitialiseMutableBuffers)
                                  for p in config.passes or ()):
        raise UsageError("this ExecutorchBackendConfig was already planned for state by "
                         "torch-tensorrt-ext; pass to_executorch the config you started from")
    # a copy, and a copy of its planner: the caller's config is not changed, and a default
    # config's planner is one instance shared by every default ExecutorchBackendConfig (a
    # dataclass default), so setting share_mutable_buffers on it would reach every later save;
    # and its cross-method planning state (the graphs it planned) is this lowering's alone, or
    # a second save's run_multimethod would re-plan the first's graphs too
    config = copy.copy(config) if config is not None else ExecutorchBackendConfig()
    planner = config.memory_planning_pass = copy.copy(config.memory_planning_pass)
    if hasattr(planner, "state"):
        planner.state = type(planner.state)()
    writes = expected_writes(edge_manager)
    names: set[str] = set()
    on_device: set[str] = set()
    for method in edge_manager.methods:
        ep = edge_manager.exported_program(method)
        names |= mutable_buffer_placeholders(ep)
        on_device |= {name for name, fqn in ep.graph_signature.inputs_to_buffers.items()
                      if fqn in writes[method].in_place}
    in_place = set().union(*(w.in_place for w in writes.values()))
    resident = _share_state_across_methods(edge_manager, config, share_across_methods, in_place)
    names |= set(resident)     # a read-only buffer resident on a device starts from its value
    config.passes = [CopyBranchResults(_clone_op(edge_manager)), *list(config.passes or ()),
                     InitialiseMutableBuffers(names)]
    config.emit_mutable_buffer_names = True
    # state an engine writes itself stays in the engine's memory; state ExecuTorch's write-back
    # copies (a host kernel) keeps its host staging, so that copy can reach it
    config.to_out_var_pass = device_state.StateOnDevicePass(on_device, config.to_out_var_pass,
                                                            resident)
    return StatePlan(config, writes, share_across_methods is not False)


def _clone_op(edge_manager):
    """The edge op that copies a tensor in this program: `_clone_dim_order` unless it was lowered
    without dim-order ops (as ExecuTorch's own passes choose)."""
    from executorch.exir.dialects._ops import ops as exir_ops
    if getattr(getattr(edge_manager, "compile_config", None), "_skip_dim_order", False):
        return exir_ops.edge.aten.clone.default
    return exir_ops.edge.dim_order_ops._clone_dim_order.default


def _delegate_devices(edge_manager) -> set[str]:
    """The devices (`target_device` compile specs; "cpu" left out) its delegates run on."""
    devices = set()
    for method in edge_manager.methods:
        gm = edge_manager.exported_program(method).graph_module
        for _, sub in gm.named_children():
            for spec in getattr(sub, "compile_specs", ()) or ():
                if spec.key == DEVICE_SPEC and spec.value.decode() != "cpu":
                    devices.add(spec.value.decode())
    return devices


def _share_state_across_methods(edge_manager, config, share,
                                in_place: set[str]) -> dict[str, tuple[int, int]]:
    """Every buffer some method writes is one allocation, of its own, that every method using it
    shares, like eager's one module (`share`: None or True — whenever the program has several
    methods and state; False: each method keeps its own copy, for loaders that share nothing).
    Host-only programs: ExecuTorch's own sharing (mem_id 2, which its
    `Module(share_memory_arenas=True)` shares). With device delegates ExecuTorch 1.5.1 cannot
    share (every tensor must be in mem_id 1): `shared_arenas` plans it per device and records the
    layout for the runtime loader; a buffer an engine writes in place in one method lives on its
    device in every method that uses it, and so does a buffer no method writes that an engine on
    the device reads (engines read every buffer live: it is planned device memory, initialised
    once per load, never staged across the link per call). Returns those: placeholder name ->
    device."""
    planner = config.memory_planning_pass
    methods = list(edge_manager.methods)
    if isinstance(planner, dict) or not getattr(planner, "alloc_mutable_buffers", False):
        return {}
    uses = _buffer_uses(edge_manager)
    mutated = _mutated(edge_manager)
    if share is None:
        share = getattr(planner, "share_mutable_buffers", False) or shares_state(mutated)
    share = bool(share) and len(methods) > 1
    devices = _delegate_devices(edge_manager)
    live = _read_on_device(edge_manager, mutated) if len(devices) == 1 else {}
    if not share and not live:
        return {}
    if not devices:
        planner.share_mutable_buffers = True
        return {}
    config.memory_planning_pass = shared_arenas.planners(
        planner, edge_manager._named_data_store, methods, live=set(live.values()))
    if len(devices) != 1:
        return {}   # which device a host-written buffer would live on is not one answer
    device = shared_arenas.parse_device(next(iter(devices)))
    resident = {name: device for name in live}
    for m in methods:
        for name, fqn in edge_manager.exported_program(m).graph_signature.inputs_to_buffers \
                .items():
            if share and fqn in in_place and len(uses.get(fqn, ())) > 1:
                resident[name] = device
    return resident


def shares_state(mutated: set[str]) -> bool:
    """Whether a program of several methods, `mutated` the buffers they write, plans its state
    apart: whenever it has any — a loader shares the methods' arenas (ExecuTorch's
    `Module(share_memory_arenas=True)`), so state left in a method's own activation arena would
    be overwritten by any other method's call (even a stateless one's)."""
    return bool(mutated)


def _read_on_device(edge_manager, mutated: set[str]) -> dict[str, str]:
    """Placeholder name -> FQN of each buffer no method mutates that a delegate on a device
    takes (every delegate of a program with one device runs on it)."""
    from executorch.exir.delegate import executorch_call_delegate
    out = {}
    for m in edge_manager.methods:
        ep = edge_manager.exported_program(m)
        buffers = ep.graph_signature.inputs_to_buffers
        for call in ep.graph_module.graph.find_nodes(op="call_function",
                                                     target=executorch_call_delegate):
            for arg in call.args[1:]:
                fqn = buffers.get(getattr(arg, "name", None))
                if fqn is not None and fqn not in mutated:
                    out[arg.name] = fqn
    return out


def _mutated(edge_manager) -> set[str]:
    return {f for m in edge_manager.methods
            for f in edge_manager.exported_program(m).graph_signature.buffers_to_mutate.values()}


def _buffer_uses(edge_manager) -> dict[str, list[str]]:
    """FQN -> the methods whose program takes the buffer."""
    used: dict[str, list[str]] = {}
    for m in edge_manager.methods:
        for fqn in set(edge_manager.exported_program(m).graph_signature.inputs_to_buffers
                       .values()):
            used.setdefault(fqn, []).append(m)
    return used


class StatefulEdgeProgramManager(EdgeProgramManager):
    """ExecuTorch's edge manager whose `to_executorch` is the stateful one: planned by
    `plan_state` once per call, lowered with autograd off, the emitted program checked."""

    def to_executorch(self, config=None, *, share_across_methods=None):
        """ExecuTorch's `to_executorch` with `plan_state`'s config; `share_across_methods`:
        None (state shared whenever several methods hold it), or False (each method keeps its
        own state, for loaders that share nothing; the cross-method check is then not asked)."""
        plan = plan_state(self, config, share_across_methods)
        # autograd off: torch.export gives a buffer written from trainable values a fake
        # value that requires grad, and ExecuTorch's retrace of its write-back `copy_` (a
        # leaf in-place) then raises — lowering computes no gradient
        with torch.no_grad():
            lowered = super().to_executorch(plan.config)
        verify_writes(lowered.executorch_program, {m: w.mutated for m, w in plan.writes.items()})
        if plan.one_state:
            check_program_state(program=lowered.executorch_program, named=lowered._named_data,
                                mutable=lowered._emitter_output.mutable_data,
                                uses=declared_uses({m: self.exported_program(m)
                                                    for m in self.methods}))
        return lowered


def stateful_edge(edge_manager):
    """The `EdgeProgramManager` torch-tensorrt's `executorch.export` returns (and ExecuTorch's
    recipe session holds), made a `StatefulEdgeProgramManager` in place — the caller keeps the
    object it holds (ExecuTorch's session keeps its own reference) — so a caller lowering several
    methods themselves gets initialised, named, unstaged state like `torch_tensorrt.save` does,
    and an emitted program that does not write each declared buffer exactly once fails it — one
    checker, `verify_writes`, on the declared writes read once (`declared_writes`) — as does one
    whose methods do not hold one state (`program_state.check_program_state`; not asked of a
    save that keeps each method's state apart on request). Constant methods meant for
    ExecuTorch's LLM runner are checked first (`llm_metadata`). It lowers with autograd off,
    whatever the caller's grad mode (a write left to PyTorch saves outside `torch.no_grad()`
    too). Only ExecuTorch's own manager class is taken (a subclass's `to_executorch` would be
    bypassed)."""
    from ...contracts.llm_metadata import check_runner_metadata
    from ...errors import UsageError
    check_runner_metadata(getattr(edge_manager, "_config_methods", None) or {})
    if type(edge_manager) is not EdgeProgramManager:
        if isinstance(edge_manager, StatefulEdgeProgramManager):
            return edge_manager
        raise UsageError(f"expected ExecuTorch's EdgeProgramManager, got "
                         f"{type(edge_manager).__qualname__}")
    edge_manager.__class__ = StatefulEdgeProgramManager
    return edge_manager
