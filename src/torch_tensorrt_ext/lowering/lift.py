"""`lift_mutated_buffers`: turn mutated buffers into engine inputs, their new values into outputs.

Invariant: the lifted graph computes exactly what the original did. Each mutated buffer's
`get_attr` becomes a placeholder (resolved by FQN, nested names included); its trailing whole-buffer
`copy_` is erased — for a KV write the engine writes in place (a KV `index_put` first becomes
its `index_copy`/`slice_scatter` form, see `index_put_kv`), for a COPY_BACK write the value
leaves the engine — and in both cases the new value becomes a graph output. The pairing of
buffers with placeholders and outputs is returned by name (`LiftedGraph`), never implied by
position conventions, and nothing is written to `gm.meta`. An ExportedProgram is lifted through
its functional form's `module(check_guards=False)`: one lift, the compiler's.

Cost: one pass over the graph to find the writes, then work per lifted buffer only — no copy of
a graph the caller hands over to be lifted in place (`in_place=True`, the compile pipeline), and
no Python code generated: the lifted module generates its code when first called
(`recompile_lazily`), so a pipeline that rewrites the graph next generates it once, after its
own rewrite.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch.fx import GraphModule, Node

from ..contracts.plan import BufferWrite, MutationPlan, PlanError
from .graph_writes import FoundWrite, functional_form, gm_writes
from .lifted_graph import (LiftedGraph, buffer_input_name, buffer_value, planned, reclaim_name,
                           recompile_lazily, row_major)


def lift_mutated_buffers(program: GraphModule | torch.export.ExportedProgram,
                         plan: MutationPlan, *, in_place: bool = False) -> LiftedGraph:
    """Lift the buffers `plan` names. `program` is the functional GraphModule the compiler gets
    (`ExportedProgram.module()` after decompositions) or an ExportedProgram.

    A GraphModule is left as it was and a copy is lifted, unless `in_place=True`: then it is
    rewritten into the lifted graph (for a caller that owns it and has no further use for the
    unlifted graph, like the compile pipeline) — no copy is made. An ExportedProgram is lifted
    from its functional form (the one `plan_mutations` computed for the same program object, not
    a second one), which is left as it was, through its `module(check_guards=False)` — the
    GraphModule compile lifts, so the public API and the compiler run one lift. The lifted
    module carries no input checks of the unlifted calling convention (`_guards_fn`, pre-hooks).
    """
    if isinstance(program, torch.export.ExportedProgram):
        functional, _origins = functional_form(program)
        gm = functional.module(check_guards=False)
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
    if any(w.copy_node is None for w in writes):   # writes found in a re-exported program
        raise PlanError(_NOT_FUNCTIONAL)
    found = planned(writes, plan)
    graph = gm.graph
    placeholders = list(graph.find_nodes(op="placeholder", sort=True))
    out_node = graph.output_node()
    outputs, _ = torch.utils._pytree.tree_flatten(out_node.args[0])
    num_user = len(outputs)
    anchor = placeholders[-1] if placeholders else None
    live = {n.name for n in graph.nodes}
    buffer_inputs, buffer_outputs, initial = [], [], []
    replaced: dict[Node, Node] = {}  # a returned copy_ (the buffer itself) -> the new value
    for entry in plan:
        w = found[entry.fqn]
        tensor = gm.get_buffer(entry.fqn)
        anchor = _buffer_input(gm, w, tensor, anchor, live)
        replaced[w.copy_node] = value = _store_as_output(gm, entry, w, tensor, anchor)
        buffer_inputs.append((entry.fqn, anchor.name))
        buffer_outputs.append((entry.fqn, len(outputs)))
        outputs.append(value)
        initial.append((entry.fqn, row_major(tensor)))
    out_node.args = (tuple(replaced.get(v, v) for v in outputs),)
    graph._codegen = torch.fx.graph.CodeGen()  # flat inputs and outputs, no pytree specs
    _forget_unlifted_signature(gm)
    graph.lint()
    recompile_lazily(gm)
    return LiftedGraph(gm, plan, tuple(n.name for n in placeholders), tuple(buffer_inputs),
                       tuple(buffer_outputs), num_user, tuple(initial))


def _buffer_input(gm: GraphModule, w: FoundWrite, tensor: torch.Tensor,
                  anchor: Node | None, live: set[str]) -> Node:
    """The buffer's placeholder `b_<fqn>`, after `anchor` (the last input so far), read where
    its `get_attr` was. `live`: the names of the graph's nodes (this one's is added)."""
    graph = gm.graph
    name = buffer_input_name(w.fqn)
    reclaim_name(graph, name, live)
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
    ph.meta["val"] = row_major(ph.meta["val"])
    return ph


def _store_as_output(gm: GraphModule, entry: BufferWrite, w: FoundWrite, tensor: torch.Tensor,
                     ph: Node) -> Node:
    """Erase the buffer's trailing `copy_` and its `get_attr` (readers now read its placeholder
    `ph`); returns the node of its new value (`buffer_value`)."""
    graph = gm.graph
    value = buffer_value(entry, w.value, tensor.shape)
    if w.copy_node.users:
        w.copy_node.replace_all_uses_with(value)
    graph.erase_node(w.copy_node)
    w.root.replace_all_uses_with(ph)
    graph.erase_node(w.root)
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


__all__: list[str] = ["LiftedGraph", "lift_mutated_buffers", "lift_writes", "recompile_lazily"]
