"""`lift_mutated_buffers`: turn mutated buffers into engine inputs, their new values into outputs.

Invariant: the lifted graph computes exactly what the original did. Each mutated buffer's
`get_attr` becomes a placeholder (resolved by FQN, nested names included); its trailing whole-buffer
`copy_` is erased — for a KV write the engine writes in place (a KV `index_put` first becomes
its `index_copy`/`slice_scatter` form, see `index_put_kv`), for a COPY_BACK write the value
leaves the engine — and in both cases the new value becomes a graph output. The pairing of
buffers with placeholders and outputs is returned by name (`LiftedGraph`), never implied by
position conventions, and nothing is written to `gm.meta`.

Cost: one pass over the graph to find the writes, then work per lifted buffer only — no copy of
a graph the caller hands over to be lifted in place (`in_place=True`, the compile pipeline; an
ExportedProgram's fresh `module()`), and no Python code generated: the lifted module generates
its code when first called (`recompile_lazily`), so a pipeline that rewrites the graph next
generates it once, after its own rewrite.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

import torch
from torch.fx import GraphModule, Node

from ..contracts.plan import BufferWrite, MutationPlan, PlanError, WriteKind
from .graph_writes import FoundWrite, functional_program, gm_writes
from .index_put_kv import INDEX_PUT, kv_form, rewrite
from .kv_rules import INDEX_COPY, NO_KV_ALIAS_MARKER, SLICE_SCATTER


@dataclass(frozen=True)
class LiftedGraph:
    """A lifted GraphModule plus the by-name pairing of buffers with its inputs and outputs.

    Calling `gm(*user_inputs, *[buffer for each buffer_inputs entry])` returns
    `(*user_outputs, *new buffer values)`; `buffer_outputs` says which output holds which
    buffer's new value.
    """

    gm: GraphModule
    plan: MutationPlan
    user_inputs: Tuple[str, ...]
    buffer_inputs: Tuple[Tuple[str, str], ...]    # (fqn, placeholder name)
    buffer_outputs: Tuple[Tuple[str, int], ...]   # (fqn, output index)
    num_user_outputs: int
    initial_values: Tuple[Tuple[str, torch.Tensor], ...]
    # the three pairings by FQN, built once (a lookup per buffer stays O(1))
    _by_fqn: Tuple[dict, dict, dict] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_fqn", (dict(self.buffer_inputs), dict(self.buffer_outputs),
                                             dict(self.initial_values)))

    def placeholder_of(self, fqn: str) -> str:
        return self._by_fqn[0][fqn]

    def output_of(self, fqn: str) -> int:
        return self._by_fqn[1][fqn]

    def initial_value(self, fqn: str) -> torch.Tensor:
        return self._by_fqn[2][fqn]


def lift_mutated_buffers(program: Union[GraphModule, torch.export.ExportedProgram],
                         plan: MutationPlan, *, in_place: bool = False) -> LiftedGraph:
    """Lift the buffers `plan` names. `program` is the functional GraphModule the compiler gets
    (`ExportedProgram.module()` after decompositions) or an ExportedProgram (lowered to one).

    A GraphModule is left as it was and a copy is lifted, unless `in_place=True`: then it is
    rewritten into the lifted graph (for a caller that owns it and has no further use for the
    unlifted graph, like the compile pipeline) — no copy is made. An ExportedProgram is lowered
    to a fresh `module()` of its functional form (the one `plan_mutations` computed for the same
    program object, not a second one), which is lifted in place.
    """
    if isinstance(program, torch.export.ExportedProgram):
        gm = functional_program(program).module()
    elif isinstance(program, GraphModule):
        gm = program if in_place else copy.deepcopy(program)
    else:
        raise PlanError(f"lift_mutated_buffers takes an ExportedProgram or a GraphModule from "
                        f"torch.export, not {type(program).__name__}")
    writes, other = gm_writes(gm)
    if other:
        raise PlanError(_NOT_FUNCTIONAL)
    return lift_writes(gm, writes, plan)


_NOT_FUNCTIONAL = ("lift_mutated_buffers needs the functional GraphModule "
                   "(ExportedProgram.run_decompositions().module()); this one writes buffers "
                   "in place")


def lift_writes(gm: GraphModule, writes: Sequence[FoundWrite], plan: MutationPlan
                ) -> LiftedGraph:
    """Lift, in place, the buffers `plan` names; `writes` are `gm`'s own whole-buffer writes
    (`graph_writes.gm_writes`), found once by a caller that planned from them too."""
    found = _planned_writes(writes, plan)
    graph = gm.graph
    placeholders = list(graph.find_nodes(op="placeholder", sort=True))
    out_node = graph.output_node()
    outputs, _ = torch.utils._pytree.tree_flatten(out_node.args[0])
    num_user = len(outputs)
    anchor = placeholders[-1] if placeholders else None
    live = {n.name for n in graph.nodes}
    buffer_inputs, buffer_outputs, initial = [], [], []
    replaced: Dict[Node, Node] = {}  # a returned copy_ (the buffer itself) -> the new value
    for entry in plan:
        w = found[entry.fqn]
        tensor = gm.get_buffer(entry.fqn)
        anchor = _buffer_input(gm, w, tensor, anchor, live)
        replaced[w.copy_node] = value = _store_as_output(gm, entry, w, tensor, anchor)
        buffer_inputs.append((entry.fqn, anchor.name))
        buffer_outputs.append((entry.fqn, len(outputs)))
        outputs.append(value)
        initial.append((entry.fqn, tensor.detach().clone()))
    out_node.args = (tuple(replaced.get(v, v) for v in outputs),)
    graph._codegen = torch.fx.graph.CodeGen()  # flat inputs and outputs, no pytree specs
    _forget_unlifted_signature(gm)
    graph.lint()
    recompile_lazily(gm)
    return LiftedGraph(gm, plan, tuple(n.name for n in placeholders), tuple(buffer_inputs),
                       tuple(buffer_outputs), num_user, tuple(initial))


def _planned_writes(writes: Sequence[FoundWrite], plan: MutationPlan) -> Dict[str, FoundWrite]:
    """The graph's writes by FQN, exactly the plan's buffers (a plan of another program, or a
    write the plan lacks, is an error naming the buffers)."""
    if any(w.copy_node is None for w in writes):   # writes found in a re-exported program
        raise PlanError(_NOT_FUNCTIONAL)
    found = {w.fqn: w for w in writes}
    missing = [w.fqn for w in plan if w.fqn not in found]
    if missing:
        raise PlanError(f"the plan names buffers {missing} that this graph does not write; "
                        "plan and lift the same program")
    unplanned = [f for f in found if f not in plan]
    if unplanned:
        raise PlanError(f"buffers {unplanned} are written by the graph but missing from the plan; "
                        "a write is never dropped — re-run plan_mutations on this program")
    return found


def _buffer_input(gm: GraphModule, w: FoundWrite, tensor: torch.Tensor,
                  anchor: Optional[Node], live: Set[str]) -> Node:
    """The buffer's placeholder `b_<fqn>`, after `anchor` (the last input so far), read where
    its `get_attr` was. `live`: the names of the graph's nodes (this one's is added)."""
    graph = gm.graph
    name = "b_" + w.fqn.replace(".", "_")
    _reclaim_name(graph, name, live)
    if anchor is None:
        ctx = graph.inserting_before(next(iter(graph.nodes)))
    else:
        ctx = graph.inserting_after(anchor)
    with ctx:
        ph = graph.placeholder(name)
    live.add(ph.name)
    ph.meta.update(w.root.meta)
    if "val" not in ph.meta:
        ph.meta["val"] = torch.empty_like(tensor, device="meta")
    return ph


def _reclaim_name(graph: torch.fx.Graph, name: str, live: Set[str]) -> None:
    """Let a new node be called `name` when no node of the graph is: fx never frees the name of
    an erased node (`ExportedProgram.module()` erases the buffer placeholders it unlifts, called
    `b_<fqn>` too), while a copy of the graph would not remember it — the lifted graph's input
    names (the engines' binding names) must not depend on whether it was copied."""
    used = getattr(getattr(graph, "_graph_namespace", None), "_used_names", None)
    if isinstance(used, set) and name not in live:
        used.discard(name)


def _store_as_output(gm: GraphModule, entry: BufferWrite, w: FoundWrite, tensor: torch.Tensor,
                     ph: Node) -> Node:
    """Erase the buffer's trailing `copy_` and its `get_attr` (readers now read its placeholder
    `ph`); returns the node of its new value — a KV `index_put` in its converter form, a
    COPY_BACK cache write marked so no converter aliases it."""
    graph = gm.graph
    value = w.value
    if entry.kind is WriteKind.KV_ALIAS and value.target is INDEX_PUT:
        value = _kv_form_of(value, tensor.shape)
    if w.copy_node.users:
        w.copy_node.replace_all_uses_with(value)
    graph.erase_node(w.copy_node)
    w.root.replace_all_uses_with(ph)
    graph.erase_node(w.root)
    if entry.kind is WriteKind.COPY_BACK and value.target in (SLICE_SCATTER, INDEX_COPY):
        # torch-tensorrt's converters read this marker: a copied-back write is never aliased.
        value.meta[NO_KV_ALIAS_MARKER] = True
    return value


# what `ExportedProgram.module()` attaches for the unlifted calling convention (input checks)
_UNLIFTED_ATTRS = ("range_constraints", "validate_inputs", "train", "eval")
_HOOKS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
          "_forward_hooks_with_kwargs", "_forward_hooks_always_called")


def _forget_unlifted_signature(gm: GraphModule) -> None:
    """Drop the forward hooks and attributes that check calls against the unlifted signature —
    what a copy of the module would not carry either (GraphModule's deepcopy drops them), so a
    graph lifted in place behaves like one lifted from a copy."""
    for name in _HOOKS:
        getattr(gm, name).clear()
    for name in _UNLIFTED_ATTRS:
        gm.__dict__.pop(name, None)


def _kv_form_of(value: Node, cache_shape) -> Node:
    """A KV-planned index_put becomes the converter form the plan judged (index_put_kv)."""
    form = kv_form(value, tuple(cache_shape))
    if isinstance(form, str):
        raise PlanError(f"buffer write {value.name!r} is planned KV_ALIAS but has no KV form here "
                        f"({form}); plan and lift the same program")
    return rewrite(value, form)


def recompile_lazily(gm: GraphModule) -> None:
    """Regenerate `gm`'s Python code when it is next needed — its first call, `.code` or
    `str(gm)` — instead of now (torch.fx's `_LazyGraphModule` does the same for inductor; this
    keeps `gm`'s own class). An ordinary `gm.recompile()` before then (the next pass of a
    pipeline that rewrites the graph again) generates it and ends the laziness."""
    cls = type(gm)
    if cls.__qualname__.split(".")[-1] != "GraphModuleImpl":   # not gm's own (GraphModule.__new__)
        gm.recompile()
        return
    cls.forward = _forward_after_codegen
    cls.code = _CODE
    cls.__str__ = _str_after_codegen


def _codegen_if_pending(gm: GraphModule) -> None:
    if type(gm).forward is _forward_after_codegen:
        GraphModule.recompile(gm)   # sets the class's forward to the generated one


def _forward_after_codegen(self, *args, **kwargs):
    _codegen_if_pending(self)
    return type(self).forward(self, *args, **kwargs)


def _code_after_codegen(self) -> str:
    _codegen_if_pending(self)
    return self._code


def _str_after_codegen(self) -> str:
    _codegen_if_pending(self)
    return GraphModule.__str__(self)


_CODE = property(_code_after_codegen)


__all__: List[str] = ["LiftedGraph", "lift_mutated_buffers", "lift_writes", "recompile_lazily"]
