"""What a patched `torch_tensorrt.dynamo.compile` runs (handed over by `seams.compile_hooks`):
plan → lift → build → reconcile → module state.

Invariant: the module `StatefulCompile.finish` returns updates every buffer the exported program
writes, exactly once per call, like eager: a write an engine aliases (`IKVCacheUpdateLayer`) is
performed in place by the engine through the buffer it is handed; who copies a copy-back write
is decided once, here, by `lowering.copier.decide` for every engine kind, and recorded in the
plan and the engine's own record: a reference engine copies its output into the buffer itself (in
PyTorch and in the delegate); a TensorRT engine's delegate does in a `.pte`, while in PyTorch —
torch-tensorrt's runtime cannot copy — and for every write the program copies, the module ends
with an `aten.copy_` of the new value into the buffer. Buffers are module state under their
original fully qualified names, so every exporter downstream declares them by name; the module
is called like the model it came from. The jobs are modules of their own: planning and lifting
(`planned_lift`), the engines' records (`engine_records`) and the module form (`module_form`);
this module runs them in order.
The reconciled plan is `module.mutation_plan`. A predicted KV write an engine did not alias
becomes copy-back (the engine is rebuilt with the write excluded when no output carries its
value) — never an abort, never a dropped write: `stateful_program` keeps every write of the
exported program out of reach of torch-tensorrt's dead-code elimination, and `finish` refuses a
module that does not perform one of them (`carried_writes`), naming the buffer and node.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

import torch
from torch.fx import GraphModule

from ..contracts.plan import MutationPlan
from ..lowering import reconcile
from ..lowering.graph_record import GraphRecord
from ..engines.engine_module import copy_record
from .carried_writes import check_carried
from .engine_records import bind_reference_buffers, engine_infos, engine_modules
from .module_form import (bodies_held_on_top, calling_convention_of, engine_results_as_returned,
                          sizes_read_from_inputs, to_module_form)
from .planned_lift import as_copy_back, mark_copy_back, plan_and_lift
from .trt_log import install as _quiet_unused_state_inputs

_quiet_unused_state_inputs()   # TensorRT's per-layer warnings about write-only state inputs

Build = Callable[[GraphModule], torch.nn.Module]


class StatefulCompile:
    """One compile of one exported program's state. `gm` is the lifted graph to lower and build
    (user inputs, then one input per mutated buffer — `buffer_tensors` in the same order).

    The GraphModule handed in is the pipeline's own (a fresh `ExportedProgram.module()`): it is
    lifted in place, once, and becomes `gm`. A rebuild starts from a `GraphRecord` of the lifted
    graph taken before the build (the build lowers the graph in place and deletes the
    parameters it folded), kept only when the plan has KV writes (only those are rebuilt)."""

    def __init__(self, gm: GraphModule, *, torch_executed_ops: Iterable[object] = (),
                 written: Mapping[str, str] | None = None):
        self._codegen = gm.graph._codegen   # the exported module's calling convention
        self._excluded = tuple(torch_executed_ops or ())
        self._written = dict(written) if written is not None else None
        self.plan, self.lifted = plan_and_lift(gm, self._excluded)
        self._record = GraphRecord.of(self.lifted.gm.graph) if self.plan.kv() else None

    @classmethod
    def from_settings(cls, gm: GraphModule, settings,
                      written: Mapping[str, str] | None = None) -> StatefulCompile:
        """`written`: what the exported program writes (`stateful_program`), checked at finish."""
        return cls(gm, torch_executed_ops=getattr(settings, "torch_executed_ops", ()) or (),
                   written=written)

    @property
    def gm(self) -> GraphModule:
        return self.lifted.gm

    @property
    def buffer_tensors(self) -> list[torch.Tensor]:
        return [t for _, t in self.lifted.initial_values]

    def finish(self, trt_gm: GraphModule, rebuild: Build | None = None) -> GraphModule:
        """Reconcile with the built engines (rebuilding once if asked), then module form."""
        sizes_read_from_inputs(trt_gm)   # first: an engine's results are then its bindings
        infos = engine_infos(trt_gm, self.lifted)
        final = reconcile(self.plan, infos)
        if final.rebuilds and rebuild is not None:
            trt_gm = rebuild(self._excluding(final))
            sizes_read_from_inputs(trt_gm)
            infos = engine_infos(trt_gm, self.lifted)
            final = reconcile(self.plan, infos)
        final = dataclasses.replace(final, rebuilds=())
        bind_reference_buffers(trt_gm, infos)
        final = to_module_form(trt_gm, self.lifted, final)
        modules = engine_modules(trt_gm)   # the copies are recorded in the engines now
        trt_gm.engine_infos = tuple(
            dataclasses.replace(i, copy_back=copy_record(modules[i.name])) for i in infos)
        engine_results_as_returned(trt_gm)
        bodies_held_on_top(trt_gm)
        calling_convention_of(trt_gm, self._codegen)
        if self._written is not None:
            check_carried(trt_gm, final, self._written)
        trt_gm.mutation_plan = final
        return trt_gm

    def _excluding(self, final: MutationPlan) -> GraphModule:
        """The lifted graph as it was before the build lowered it, with the writes `final` asks
        to rebuild without aliasing made copy-back (every new value is an output already, so
        only the marker differs from lifting them as copy-back)."""
        excluded = sorted({f for r in final.rebuilds for f in r.exclude_from_aliasing})
        self.plan = as_copy_back(self.plan, {
            f: final[f].reason + " (engine rebuilt with the write excluded from aliasing)"
            for f in excluded})
        gm = self._record.rebuild(self.lifted.gm)
        self.lifted = dataclasses.replace(self.lifted, gm=gm, plan=self.plan)
        mark_copy_back(self.lifted, excluded)
        return gm


def stateful_program(program: torch.export.ExportedProgram
                     ) -> tuple[torch.export.ExportedProgram, dict[str, str]]:
    """What compile hands torch-tensorrt's lowering, and which buffers the program writes (FQN ->
    the node writing it) for `StatefulCompile.finish`'s check.

    First, where torch.export left a node's readers unrecorded (a `no_grad` block it inlined
    itself, exporting under `torch.no_grad()` as ExecuTorch's export API does), they are
    recorded again (`node_users`): torch-tensorrt's dead-code elimination would otherwise delete
    a value a buffer write still reads.

    Every written constant that is really module state is carried as a buffer (non-strict
    export lifts state held on plain objects as constants), so its writes are planned; a written
    user input or parameter is refused naming it (`mutated_inputs`). A `with torch.no_grad():`
    block is inlined next (`grad_blocks`): its writes are then the program's own, seen by every
    pass as those of a program written without it. A program writing a buffer inside another
    higher-order op, or through an op whose schema does not declare the write (a train-mode
    batch norm's running statistics: `composite_writes`), is functionalized here:
    torch-tensorrt's pre-lowering cleans the graph with fx's dead-code elimination, which deletes
    such an op (and the write in it) when nothing reads its result; as a program output the new
    value cannot be deleted. Two writes torch-tensorrt's lowering would lose are first rewritten
    to the same values: a negative `select` index (`buf[-1]`) and the broadcast (and dtype
    conversion) of a `copy_` or `fill_` value into its buffer (`broadcast_writes`); a scatter-add
    over a dynamic length, which its decomposition would unroll and so make static, becomes an
    accumulating `index_put` (`dynamic_scatters`); and a buffer copied whole from a value another
    write also ends on gets its own copy of it, which functionalization would refuse
    (`copy_sources`). The rewrites are `rewrites.SAME_VALUE`, made in order by `rewrites.rewritten`
    on a copy of the program's graphs, made only when one applies (none more when an earlier step
    already made a new program): the caller's program is left as it was."""
    from ..lowering.grad_blocks import without_grad_blocks
    from ..lowering.graph_writes import buffer_writers, functional_program, hides_writes
    from ..lowering.mutated_inputs import inputs_as_state
    from ..lowering.node_users import with_node_users
    from ..lowering.rewrites import SAME_VALUE, rewritten
    state = with_node_users(program)       # a new program where fx's reader index was wrong
    state = without_grad_blocks(state)     # a new program where a no_grad block was inlined
    state = inputs_as_state(state)[0]      # a new program where a constant became a buffer
    state = rewritten(state, SAME_VALUE, owned=state is not program).program
    writers = buffer_writers(state)
    if hides_writes(state):
        state = functional_program(state)   # the functional form buffer_writers computed
    return state, writers


def plan_of(module: torch.nn.Module) -> MutationPlan | None:
    """The reconciled plan a patched `torch_tensorrt.compile` attached, if any."""
    return getattr(module, "mutation_plan", None)


__all__ = ["StatefulCompile", "plan_of", "stateful_program"]
