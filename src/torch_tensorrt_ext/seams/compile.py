"""The `torch_tensorrt.dynamo.compile` seam: plan → lift → build → reconcile → module state.

Invariant: the module `StatefulCompile.finish` returns updates every buffer the exported program
writes, exactly once per call, like eager: a write an engine aliases (`IKVCacheUpdateLayer`) is
performed in place by the engine through the buffer it is handed; who copies a copy-back write
is decided once, here, by `lowering.copier.decide` for every engine kind, and recorded in the
plan and the engine's own record: a reference engine copies its output into the buffer itself (in
PyTorch and in the delegate); a TensorRT engine's delegate does in a `.pte`, while in PyTorch —
torch-tensorrt's runtime cannot copy — and for every write the program copies, the module ends
with an `aten.copy_` of the new value into the buffer. Buffers are module state under their
original fully qualified names, so every exporter downstream declares them by name; the module
is called like the model it came from.
The reconciled plan is `module.mutation_plan`. A predicted KV write an engine did not alias
becomes copy-back (the engine is rebuilt with the write excluded when no output carries its
value) — never an abort, never a dropped write: `stateful_program` keeps every write of the
exported program out of reach of torch-tensorrt's dead-code elimination, and `finish` refuses a
module that does not perform one of them (`carried_writes`), naming the buffer and node.
"""
from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence

import torch
from torch.fx import GraphModule, Node

from ..contracts.engine import AliasedIO, EngineInfo
from ..lowering import LiftedGraph, reconcile
from ..lowering.classify import plan_writes
from ..lowering.graph_record import GraphRecord
from ..lowering.graph_writes import FoundWrite, find_buffer_writes
from ..lowering.kv_rules import INDEX_COPY, NO_KV_ALIAS_MARKER, SLICE_SCATTER, old_value_read
from ..lowering.lift import lift_writes, recompile_lazily
from ..lowering.lifted_graph import buffer_input_name, reclaim_name
from ..contracts.plan import Copier, MutationPlan, PlanError, WriteKind
from ..engines.tensorrt_info import COPY_BACK_ATTR
from ..lowering import copier
from .carried_writes import check_carried
from .trt_log import install as _quiet_unused_state_inputs
from .module_state import set_buffer

_quiet_unused_state_inputs()   # TensorRT's per-layer warnings about write-only state inputs

Build = Callable[[GraphModule], torch.nn.Module]
_SHARED = contextvars.ContextVar("tte_shared_state", default=frozenset())


@contextlib.contextmanager
def shared_state(fqns: Iterable[str]):
    """Inside, `compile` keeps the named buffers engine inputs even where this program only
    reads them — another method of the same module writes them, so they are live state, not
    constants to fold into an engine."""
    token = _SHARED.set(frozenset(fqns))
    try:
        yield
    finally:
        _SHARED.reset(token)


def _lift_read_only(lifted: LiftedGraph, fqns: Iterable[str]) -> LiftedGraph:
    """Also lift buffers this program only reads (shared state) to inputs after the others."""
    gm, graph = lifted.gm, lifted.gm.graph
    wanted = set(fqns) - {f for f, _ in lifted.buffer_inputs}
    reads: dict[str, list[Node]] = {}
    for n in graph.find_nodes(op="get_attr"):   # one pass, whatever the number of buffers
        if str(n.target) in wanted:
            reads.setdefault(str(n.target), []).append(n)
    if not reads:
        return lifted
    anchor = list(graph.find_nodes(op="placeholder"))[-1]
    inputs, initial = list(lifted.buffer_inputs), list(lifted.initial_values)
    live = {n.name for n in graph.nodes}
    for fqn in sorted(reads):
        name = buffer_input_name(fqn)
        reclaim_name(graph, name, live)   # module() used it for the placeholder it unlifted
        with graph.inserting_after(anchor):
            ph = graph.placeholder(name)
        live.add(ph.name)
        ph.meta.update(reads[fqn][0].meta)
        for r in reads[fqn]:
            r.replace_all_uses_with(ph)
            graph.erase_node(r)
        anchor = ph
        inputs.append((fqn, ph.name))
        initial.append((fqn, gm.get_buffer(fqn).detach().clone()))
    graph.lint()
    recompile_lazily(gm)
    return dataclasses.replace(lifted, buffer_inputs=tuple(inputs), initial_values=tuple(initial))


def _engine_modules(trt_gm: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """call_module targets that are TensorRT engines (they report binding names)."""
    return {name: m for name, m in trt_gm.named_children()
            if hasattr(m, "input_binding_names") and hasattr(m, "output_binding_names")}


def _output_of(call: Node, k: int, n_outputs: int) -> Node | None:
    if n_outputs == 1:
        return call
    for u in call.users:
        if u.target is operator.getitem and u.args[1] == k:
            return u
    return None


def _recorded_copy_back(module: torch.nn.Module) -> tuple[tuple[str, str], ...]:
    """The copies `_record_copy` wrote into an engine's own record: a reference engine's
    `copy_back`, a TensorRT engine's `tte_copy_back` attribute."""
    pairs = getattr(module, "copy_back", None)
    if pairs is None:
        pairs = getattr(module, COPY_BACK_ATTR, ())
    return tuple((o, i) for o, i in pairs)


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
    modules = _engine_modules(trt_gm)
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
                                kind=getattr(m, "engine_kind", "tensorrt"),
                                copy_back=_recorded_copy_back(m)))
    return tuple(infos)


READS_OLD_CACHE = ("the program reads the cache's old value after writing it; an in-place "
                   "write would change what that read sees")


def _cache_writes(ph: Node) -> list[Node]:
    return [u for u in ph.users if u.target in (SLICE_SCATTER, INDEX_COPY) and u.args[0] is ph]


def _lift(gm: GraphModule, excluded: Sequence[object]) -> tuple[MutationPlan, LiftedGraph]:
    """Plan `gm`'s writes and lift them, in place and once (the writes are found once, for both).

    A KV write whose cache is read again after the write (the old value) is copied back —
    TensorRT would alias it, but an in-place update under a later read is not what eager
    computes; this is decided on the graph before lifting, so no second lift is needed. Every
    cache write into a copy-back buffer's input — not only the last — is marked so no converter
    aliases it: an intermediate `IKVCacheUpdateLayer` would write the buffer in place mid-engine
    while the plan copies its final value back."""
    analysed, found = find_buffer_writes(gm)
    plan = plan_writes(analysed, found, torch_executed_ops=excluded)
    if analysed is gm:   # else re-exported: lift_writes refuses a graph writing buffers in place
        plan = _as_copy_back(plan, _stale_kv(gm, found, plan))
    lifted = lift_writes(gm, found, plan)
    _mark_copy_back(lifted, (w.fqn for w in plan.copy_back()))
    if _SHARED.get():
        lifted = _lift_read_only(lifted, _SHARED.get())
    return plan, lifted


def _stale_kv(gm: GraphModule, found: Sequence[FoundWrite], plan: MutationPlan) -> dict[str, str]:
    """KV writes whose cache is read after the write, with their copy-back reason, judged on the
    unlifted graph (the buffer's own trailing `copy_` is not a read)."""
    kv = plan.kv()
    if not kv:
        return {}
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    by_fqn = {w.fqn: w for w in found}
    stale = {}
    for entry in kv:
        w = by_fqn[entry.fqn]
        if old_value_read(w.root, w.value, order, ignore=(w.copy_node,)):
            stale[entry.fqn] = f"{entry.reason}, but {READS_OLD_CACHE}; copied back"
    return stale


def _as_copy_back(plan: MutationPlan, reasons: dict[str, str]) -> MutationPlan:
    """`plan` with the writes `reasons` names made COPY_BACK for those reasons (one pass)."""
    if not reasons:
        return plan
    return dataclasses.replace(plan, writes=tuple(
        dataclasses.replace(w, kind=WriteKind.COPY_BACK, reason=reasons[w.fqn])
        if w.fqn in reasons else w for w in plan))


def _mark_copy_back(lifted: LiftedGraph, fqns: Iterable[str]) -> None:
    """Mark each named buffer's new value and every cache write into its input
    `_trt_no_kv_alias` — what lifting it as COPY_BACK gives, on a graph already lifted."""
    graph = lifted.gm.graph
    nodes = {n.name: n for n in graph.find_nodes(op="placeholder")}
    outs = graph.output_node().args[0]
    for fqn in fqns:
        value = outs[lifted.output_of(fqn)]
        writes = _cache_writes(nodes[lifted.placeholder_of(fqn)])
        if isinstance(value, Node) and value.target in (SLICE_SCATTER, INDEX_COPY):
            writes.append(value)
        for write in writes:
            write.meta[NO_KV_ALIAS_MARKER] = True


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
        self.plan, self.lifted = _lift(gm, self._excluded)
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
        _sizes_read_from_inputs(trt_gm)   # first: an engine's results are then its bindings
        infos = engine_infos(trt_gm, self.lifted)
        final = reconcile(self.plan, infos)
        if final.rebuilds and rebuild is not None:
            trt_gm = rebuild(self._excluding(final))
            _sizes_read_from_inputs(trt_gm)
            infos = engine_infos(trt_gm, self.lifted)
            final = reconcile(self.plan, infos)
        final = dataclasses.replace(final, rebuilds=())
        _bind_reference_buffers(trt_gm, infos)
        final = _to_module_form(trt_gm, self.lifted, final)
        modules = _engine_modules(trt_gm)   # the copies are recorded in the engines now
        trt_gm.engine_infos = tuple(
            dataclasses.replace(i, copy_back=_recorded_copy_back(modules[i.name])) for i in infos)
        _engine_results_as_returned(trt_gm)
        _calling_convention_of(trt_gm, self._codegen)
        if self._written is not None:
            check_carried(trt_gm, final, self._written)
        trt_gm.mutation_plan = final
        return trt_gm

    def _excluding(self, final: MutationPlan) -> GraphModule:
        """The lifted graph as it was before the build lowered it, with the writes `final` asks
        to rebuild without aliasing made copy-back (every new value is an output already, so
        only the marker differs from lifting them as copy-back)."""
        excluded = sorted({f for r in final.rebuilds for f in r.exclude_from_aliasing})
        self.plan = _as_copy_back(self.plan, {
            f: final[f].reason + " (engine rebuilt with the write excluded from aliasing)"
            for f in excluded})
        gm = self._record.rebuild(self.lifted.gm)
        self.lifted = dataclasses.replace(self.lifted, gm=gm, plan=self.plan)
        _mark_copy_back(self.lifted, excluded)
        return gm


def _engines_are_side_effects(gm: GraphModule) -> None:
    """An engine writes state (in place, or its own copy-back) even when no output of it is read:
    neither fx's dead-code elimination nor an export may drop its call."""
    for module in _engine_modules(gm).values():
        module._is_impure = True
    for name in ("execute_engine", "no_op_placeholder_for_execute_engine"):
        op = getattr(getattr(torch.ops, "tensorrt", None), name, None)
        if op is not None:
            torch.fx.node.has_side_effect(op.default)


def _bind_reference_buffers(trt_gm: GraphModule, infos: Sequence[EngineInfo]) -> None:
    """Reference engines carry their buffers' FQNs in their own record (TensorRT engines get
    them from the ExecuTorch partitioner)."""
    modules = _engine_modules(trt_gm)
    for info in infos:
        bind = getattr(modules.get(info.name), "bind_buffers", None)
        if bind is not None:
            bind(info.input_buffers)


def _record_copy(module: torch.nn.Module, output: str, input: str) -> None:
    """Write the decision into the engine's own record: a reference engine's `copy_back` (its
    kernel then copies in PyTorch too), a TensorRT engine's `tte_copy_back` (packed into its
    serialized metadata by patch 0004, read by the ExecuTorch lowering and the delegate)."""
    copy_back_into = getattr(module, "copy_back_into", None)
    if copy_back_into is not None:
        copy_back_into(output, input)
        return
    record = [list(p) for p in getattr(module, COPY_BACK_ATTR, ())]
    if any(p[0] == output for p in record):
        raise PlanError(f"engine {getattr(module, 'name', '?')!r}: output {output!r} is "
                        f"recorded as copied back twice (into {input!r} and an earlier input)")
    setattr(module, COPY_BACK_ATTR, record + [[output, input]])


def _old_values_kept(graph, user_outputs: list[object], getattrs: Mapping[str, Node],
                     written: Sequence[tuple[str, int]]) -> list[object]:
    """A user output that is a written buffer itself means the buffer's value *before* the call
    (the exported program's functional meaning; torch-tensorrt's lowering drops the `clone` that
    said so). Once the buffer is module state written in place, returning it would hand out the
    new value: such an output becomes a clone taken before anything writes the buffer."""
    written_fqns = {f for f, _ in written}
    clones: dict[Node, Node] = {}
    out = []
    for o in user_outputs:
        fqn = next((f for f, ga in getattrs.items() if ga is o), None)
        if fqn is not None and fqn in written_fqns:
            if o not in clones:
                with graph.inserting_after(o):
                    clones[o] = graph.call_function(torch.ops.aten.clone.default, (o,))
                clones[o].meta.update(o.meta)
            o = clones[o]
        out.append(o)
    return out


def _to_module_form(gm: GraphModule, lifted: LiftedGraph, plan: MutationPlan) -> MutationPlan:
    """Buffers become module state read through get_attr; aliased writes stay in the engines;
    who copies each copy-back write is decided (`copier.decide`, on the graph before any
    write-back exists) and recorded in the engine (`_record_copy`) and in the returned plan
    (`engine_copies`, with the decision's reason); a write the program copies, or a TensorRT
    engine's (its runtime in PyTorch cannot copy), is an `aten.copy_` into its buffer before the
    graph returns."""
    graph = gm.graph
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    out_node = graph.output_node()
    getattrs: dict[str, Node] = {}
    for fqn, tensor in lifted.initial_values:
        set_buffer(gm, fqn, tensor.clone())
    for fqn, ph_name in lifted.buffer_inputs:
        ph = placeholders.get(ph_name)
        with graph.inserting_before(ph if ph is not None else out_node):
            ga = graph.get_attr(fqn)
        if ph is not None:
            ga.meta.update(ph.meta)
            ph.replace_all_uses_with(ga)
            graph.erase_node(ph)
        getattrs[fqn] = ga
    outs = list(out_node.args[0])   # read after the placeholders became get_attrs
    outs[:lifted.num_user_outputs] = _old_values_kept(graph, outs[:lifted.num_user_outputs],
                                                      getattrs, lifted.buffer_outputs)
    values = {fqn: outs[idx] for fqn, idx in lifted.buffer_outputs}
    decisions = {d.fqn: d for d in map(copier.decide, copier.sites(
        plan, values, getattrs, outs[:lifted.num_user_outputs]))}
    with graph.inserting_before(out_node):
        for fqn, idx in lifted.buffer_outputs:
            d = decisions.get(fqn)
            if d is None:
                continue   # written in place by its engine (KV)
            plan = plan.replace(fqn, reason=f"{plan[fqn].reason}; {d.why}",
                                engine_copies=d.copier is Copier.ENGINE)
            module = getattr(gm, d.engine) if d.engine else None
            if d.copier is Copier.ENGINE:
                _record_copy(module, d.output, d.input)
                if hasattr(module, "copy_back_into"):
                    continue   # the reference kernel copies it in PyTorch as in the delegate
            # torch-tensorrt's runtime cannot copy into a buffer: in PyTorch the module writes
            # the value back itself (the ExecuTorch delegate reads the engine's record instead)
            copy_ = graph.call_function(torch.ops.aten.copy_.default, (getattrs[fqn], outs[idx]))
            copy_.meta["val"] = getattrs[fqn].meta.get("val")
    out_node.args = (tuple(outs[:lifted.num_user_outputs]),)
    _engines_are_side_effects(gm)
    graph.eliminate_dead_code()
    graph.lint()
    gm.recompile()
    return plan


def _engine_results_as_returned(gm: GraphModule) -> None:
    """Read each TensorRT engine's results the way its module returns them. The module (ours
    without a device, upstream's `forward` with one) drops the aliased outputs after its last
    user output (`user_output_count`) and returns a lone remaining output bare — while the graph
    indexes the call (`getitem(call, 0)`) whenever the partition returned several values, a KV
    write's new value among them. Left so, a 0-dim result fails the save's retrace ("invalid
    index of a 0-dim tensor") and a `[1, ...]` one is silently sliced. A read of a dropped
    output cannot be served and is refused naming engine and output."""
    from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import user_output_count
    from .engines import ReferenceEngineModule   # returns what the graph reads (n_graph_outputs)
    changed = False
    for name, module in _engine_modules(gm).items():
        if isinstance(module, ReferenceEngineModule) or not getattr(module, "aliased_io", None):
            continue
        names = list(module.output_binding_names)
        kept = user_output_count(names, module.aliased_io)
        for call in (n for n in gm.graph.nodes if n.op == "call_module" and n.target == name):
            for use in list(call.users):
                if use.target is not operator.getitem:
                    continue
                k = use.args[1]
                if k >= kept:
                    raise PlanError(
                        f"engine {name!r}: the graph reads its output {names[k]!r} (result "
                        f"{k}), which the engine module does not return: it returns only the "
                        f"first {kept} of {names} (the rest are aliased outputs, written in "
                        "place). Please report this with the program")
                if kept == 1:
                    use.replace_all_uses_with(call)
                    gm.graph.erase_node(use)
                    changed = True
            val = call.meta.get("val")
            if kept == 1 and isinstance(val, (list, tuple)) and len(val) > 1:
                call.meta["val"] = [val[0]]   # a single-result call, as torch-tensorrt keeps one
    if changed:
        gm.recompile()


def _sizes_read_from_inputs(gm: GraphModule) -> None:
    """A reference engine's results that are its inputs' sizes (a partition handing a dynamic
    length on, `size_outputs`) are read in the graph itself — `aten.sym_size.int` of the
    argument — and the engine returns only its tensors, so every exporter sees an engine call
    that returns tensors (as a TensorRT engine's bindings are)."""
    from .engines import ReferenceEngineModule
    changed = False
    for name, module in _engine_modules(gm).items():
        if not isinstance(module, ReferenceEngineModule) or not module.size_outputs:
            continue
        sizes = {pos: (i, d) for pos, i, d in module.size_outputs}
        n = module.n_graph_outputs
        tensor_index = {}
        for pos in range(n):
            if pos not in sizes:
                tensor_index[pos] = len(tensor_index)
        for call in (c for c in gm.graph.nodes if c.op == "call_module" and c.target == name):
            users = list(call.users)
            if any(u.target is not operator.getitem for u in users):
                raise PlanError(f"engine {name!r}: its results are read other than by index; "
                                "please report this with the program")
            for use in users:
                k = use.args[1]
                if k in sizes:
                    i, d = sizes[k]
                    with gm.graph.inserting_before(use):
                        size = gm.graph.call_function(torch.ops.aten.sym_size.int,
                                                      (call.args[i], d))
                    size.meta.update(use.meta)
                    use.replace_all_uses_with(size)
                    gm.graph.erase_node(use)
                else:
                    use.args = (call, tensor_index[k])
            val = call.meta.get("val")
            if isinstance(val, (list, tuple)):
                call.meta["val"] = [v for k, v in enumerate(val) if k not in sizes]
        module.n_graph_outputs = len(tensor_index)
        module.size_outputs = ()
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()


def _calling_convention_of(gm: GraphModule, codegen: object) -> None:
    """Take the exported module's own calling convention (its pytree of inputs and outputs,
    `codegen`): the compiled module is called, and returns, exactly like the model it was
    compiled from."""
    if isinstance(codegen, torch.fx.graph._PyTreeCodeGen):
        gm.graph._codegen = copy.deepcopy(codegen)
        gm.recompile()


def stateful_program(program: torch.export.ExportedProgram
                     ) -> tuple[torch.export.ExportedProgram, dict[str, str]]:
    """What compile hands torch-tensorrt's lowering, and which buffers the program writes (FQN ->
    the node writing it) for `StatefulCompile.finish`'s check.

    Every written constant that is really module state is carried as a buffer (non-strict
    export lifts state held on plain objects as constants), so its writes are planned; a written
    user input or parameter is refused naming it (`mutated_inputs`). A program writing a buffer
    inside a higher-order op — a `with torch.no_grad():` block is one — is functionalized here:
    torch-tensorrt's pre-lowering cleans the graph with fx's dead-code elimination, which deletes
    such an op (and the write in it) when nothing reads its result; as a program output the new
    value cannot be deleted. Two writes torch-tensorrt's lowering would lose are first rewritten
    to the same values, in the program's own graph: a negative `select` index (`buf[-1]`) and a
    0-d `fill_` value's broadcast."""
    from ..lowering.graph_writes import buffer_writers, functional_program, hides_writes
    from ..lowering.mutated_inputs import inputs_as_state
    from ..lowering.fill_writes import expand_fill_values
    from ..lowering.negative_indices import normalize_select_scatter
    from ..lowering.empty_cat import drop_empty_cat_operands
    state = inputs_as_state(program)[0]
    normalize_select_scatter(state.graph_module)   # torch-tensorrt drops a write to buf[-1]
    drop_empty_cat_operands(state.graph_module)    # a cat onto a legacy empty tensor stays on host
    expand_fill_values(state.graph_module)         # and the broadcast of a 0-d fill_ value
    writers = buffer_writers(state)
    if hides_writes(state):
        state = functional_program(state)   # the functional form buffer_writers computed
    return state, writers


def plan_of(module: torch.nn.Module) -> MutationPlan | None:
    """The reconciled plan a patched `torch_tensorrt.compile` attached, if any."""
    return getattr(module, "mutation_plan", None)


__all__ = ["StatefulCompile", "engine_infos", "plan_of", "stateful_program"]
