"""`lift_mutated_buffers`: turn mutated buffers into engine inputs, their new values into outputs.

Invariant: the lifted graph computes exactly what the original did. Each mutated buffer's
`get_attr` becomes a placeholder (resolved by FQN, nested names included); its trailing whole-buffer
`copy_` is erased — for a KV write the engine writes in place (a KV `index_put` first becomes
its `index_copy`/`slice_scatter` form, see `index_put_kv`), for a COPY_BACK write the value
leaves the engine — and in both cases the new value becomes a graph output. The pairing of
buffers with placeholders and outputs is returned by name (`LiftedGraph`), never implied by
position conventions, and nothing is written to `gm.meta`.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Dict, Tuple, Union

import torch
from torch.fx import GraphModule, Node

from ..contracts.plan import MutationPlan, PlanError, WriteKind
from .graph_writes import find_buffer_writes, functional_program
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

    def placeholder_of(self, fqn: str) -> str:
        return dict(self.buffer_inputs)[fqn]

    def output_of(self, fqn: str) -> int:
        return dict(self.buffer_outputs)[fqn]

    def initial_value(self, fqn: str) -> torch.Tensor:
        return dict(self.initial_values)[fqn]


def _flat_outputs(gm: GraphModule) -> Tuple[Node, list]:
    out = gm.graph.output_node()
    vals = out.args[0]
    flat, _ = torch.utils._pytree.tree_flatten(vals)
    return out, flat


def _kv_form_of(value: Node, cache_shape) -> Node:
    """A KV-planned index_put becomes the converter form the plan judged (index_put_kv)."""
    form = kv_form(value, tuple(cache_shape))
    if isinstance(form, str):
        raise PlanError(f"buffer write {value.name!r} is planned KV_ALIAS but has no KV form here "
                        f"({form}); plan and lift the same program")
    return rewrite(value, form)


def lift_mutated_buffers(program: Union[GraphModule, torch.export.ExportedProgram],
                         plan: MutationPlan) -> LiftedGraph:
    """Lift the buffers `plan` names. `program` is the functional GraphModule the compiler gets
    (`ExportedProgram.module()` after decompositions) or an ExportedProgram (lowered to one)."""
    if isinstance(program, torch.export.ExportedProgram):
        program = functional_program(program).module()
    gm = copy.deepcopy(program)
    _, writes = find_buffer_writes(gm)
    if any(w.copy_node is None for w in writes):
        raise PlanError("lift_mutated_buffers needs the functional GraphModule "
                        "(ExportedProgram.run_decompositions().module()); this one writes buffers "
                        "in place")
    found = {w.fqn: w for w in writes}
    missing = [w.fqn for w in plan if w.fqn not in found]
    if missing:
        raise PlanError(f"the plan names buffers {missing} that this graph does not write; "
                        "plan and lift the same program")
    unplanned = [f for f in found if f not in plan]
    if unplanned:
        raise PlanError(f"buffers {unplanned} are written by the graph but missing from the plan; "
                        "a write is never dropped — re-run plan_mutations on this program")

    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    user_inputs = tuple(n.name for n in placeholders)
    out_node, flat_outs = _flat_outputs(gm)
    num_user = len(flat_outs)

    buffer_inputs, buffer_outputs, initial = [], [], []
    anchor = placeholders[-1] if placeholders else None
    new_outputs = list(flat_outs)
    replaced: Dict[Node, Node] = {}  # a returned copy_ (the buffer itself) -> the new value
    for entry in plan:
        w = found[entry.fqn]
        tensor = gm.get_buffer(entry.fqn)
        if anchor is None:
            ctx = graph.inserting_before(next(iter(graph.nodes)))
        else:
            ctx = graph.inserting_after(anchor)
        with ctx:
            ph = graph.placeholder("b_" + entry.fqn.replace(".", "_"))
        ph.meta.update(w.root.meta)
        if "val" not in ph.meta:
            ph.meta["val"] = torch.empty_like(tensor, device="meta")
        anchor = ph
        value = w.value
        if entry.kind is WriteKind.KV_ALIAS and value.target is INDEX_PUT:
            value = _kv_form_of(value, gm.get_buffer(entry.fqn).shape)
        if w.copy_node.users:
            w.copy_node.replace_all_uses_with(value)
        replaced[w.copy_node] = value
        graph.erase_node(w.copy_node)
        w.root.replace_all_uses_with(ph)
        graph.erase_node(w.root)
        if entry.kind is WriteKind.COPY_BACK and value.target in (SLICE_SCATTER, INDEX_COPY):
            # torch-tensorrt's converters read this marker: a copied-back write is never aliased.
            value.meta[NO_KV_ALIAS_MARKER] = True
        buffer_inputs.append((entry.fqn, ph.name))
        buffer_outputs.append((entry.fqn, len(new_outputs)))
        new_outputs.append(value)
        initial.append((entry.fqn, tensor.detach().clone()))

    out_node.args = (tuple(replaced.get(v, v) for v in new_outputs),)
    graph._codegen = torch.fx.graph.CodeGen()  # flat inputs and outputs, no pytree specs
    graph.eliminate_dead_code()
    graph.lint()
    gm.recompile()
    return LiftedGraph(gm, plan, user_inputs, tuple(buffer_inputs), tuple(buffer_outputs),
                       num_user, tuple(initial))
