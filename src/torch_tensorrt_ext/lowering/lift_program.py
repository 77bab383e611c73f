"""Lift a functional ExportedProgram straight from its buffer inputs, without `module()`.

Invariant: `lift_program(ep, writes, plan)` returns what lifting `ep.module(check_guards=False)`
returns (`lift.lift_writes`): the same nodes in the same order with the same names, targets and
arguments, the same inputs, outputs and by-name pairings, the same initial values, and the same
attributes registered the same way (parameters; persistent and non-persistent buffers; lifted
constants as plain attributes; the program's own submodules) — or None for a program whose
signature holds something `module()` does more for (effect tokens, script objects, mutated
parameters or user inputs), which the caller lifts through `module()` instead. `ep` is left as
it was: its graph is copied, never rewritten.

Why: `module()` copies the graph, turns every parameter, buffer and constant input into a
`get_attr`, adds a `copy_` per mutated buffer, builds input guards and generates the Python code
several times — and the lift then undoes the planned buffers' half of that. Here a planned
buffer's input stays an input: one copy of the graph, work per input and per planned buffer,
and one code generation, of the lifted graph.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx import GraphModule, Node

from ..contracts.plan import MutationPlan
from .graph_writes import FoundWrite
from .lifted_graph import LiftedGraph, buffer_input_name, buffer_value, planned

_UNLIFTED = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
_INPUTS = frozenset(_UNLIFTED + (InputKind.USER_INPUT,))
_OUTPUTS = frozenset((OutputKind.BUFFER_MUTATION, OutputKind.USER_OUTPUT))


def liftable(ep: torch.export.ExportedProgram) -> bool:
    """Whether every input is a parameter, buffer, tensor constant or user input, and every
    output a buffer's new value or a user output — all `lift_program` redoes of `module()`."""
    sig = ep.graph_signature
    placeholders = ep.graph.find_nodes(op="placeholder")
    return (all(s.kind in _INPUTS for s in sig.input_specs)
            and all(s.kind in _OUTPUTS for s in sig.output_specs)
            and len(placeholders) == len(sig.input_specs))


def lift_program(ep: torch.export.ExportedProgram, writes: Sequence[FoundWrite],
                 plan: MutationPlan) -> LiftedGraph | None:
    """The lifted GraphModule of functional program `ep`, whose buffer writes `writes`
    (`graph_writes.ep_writes`) `plan` planned; None when `ep` is not `liftable`."""
    if not liftable(ep):
        return None
    found = planned(writes, plan)
    gm = GraphModule(torch.nn.Module(), torch.fx.Graph())
    gm.training = ep.graph_module.training
    _register_state(gm, ep)
    _copy_submodules(gm, ep)
    graph = torch.fx.Graph()
    copies: dict[Node, Node] = {}
    returned, old_output = graph.graph_copy(ep.graph, copies, return_output_node=True)
    user_inputs = _unlift_state(graph, ep, copies, found)
    anchor = user_inputs[-1] if user_inputs else None
    final: dict[Node, Node] = {}   # a new value's copy -> what the lifted graph returns for it
    buffer_inputs, buffer_outputs, initial, new_values = [], [], [], []
    user_outputs = [v for s, v in zip(ep.graph_signature.output_specs, returned, strict=False)
                    if s.kind is OutputKind.USER_OUTPUT]
    for entry in plan:
        w = found[entry.fqn]
        tensor = gm.get_buffer(entry.fqn)
        anchor = _buffer_input(graph, copies[w.root], w.fqn, anchor, tensor)
        value = copies[w.value]
        final[value] = buffer_value(entry, value, tensor.shape)
        new_values.append(final[value])
        buffer_inputs.append((entry.fqn, anchor.name))
        buffer_outputs.append((entry.fqn, len(user_outputs) + len(initial)))
        initial.append((entry.fqn, tensor.detach().clone()))
    outputs = [final.get(v, v) for v in user_outputs] + new_values
    graph.output(tuple(outputs)).meta.update(old_output.meta)
    graph.lint()
    gm.graph = graph   # generates the lifted graph's code, once
    gm.meta.update(ep.graph_module.meta)
    return LiftedGraph(gm, plan, tuple(n.name for n in user_inputs), tuple(buffer_inputs),
                       tuple(buffer_outputs), len(user_outputs), tuple(initial))


def _register_state(gm: GraphModule, ep: torch.export.ExportedProgram) -> None:
    """The program's state on `gm` as `module()` leaves it, in its order (the inputs'):
    parameters, buffers (persistent or not), tensor constants as plain attributes (detached:
    a constant needs no gradient), then any other constant of the program."""
    for spec in ep.graph_signature.input_specs:
        if spec.kind not in _UNLIFTED:
            continue
        owner, field = _owner(gm, spec.target)
        if spec.kind is InputKind.PARAMETER:
            owner.register_parameter(field, ep.state_dict[spec.target])
        elif spec.kind is InputKind.BUFFER and spec.persistent is False:
            owner.register_buffer(field, ep.constants[spec.target], persistent=False)
        elif spec.kind is InputKind.BUFFER:
            owner.register_buffer(field, ep.state_dict[spec.target])
        else:
            value = ep.constants[spec.target]
            setattr(owner, field, value.detach() if value.requires_grad else value)
    for name, value in ep.constants.items():
        owner, field = _owner(gm, name)
        if not hasattr(owner, field):
            setattr(owner, field, value)


def _owner(root: torch.nn.Module, target: str) -> tuple[torch.nn.Module, str]:
    """The module holding `target` under `root` (made, as plain modules, where missing) and the
    attribute's own name."""
    *path, field = target.split(".")
    for item in path:
        if not hasattr(root, item):
            setattr(root, item, torch.nn.Module())
        root = getattr(root, item)
    return root, field


def _copy_submodules(gm: GraphModule, ep: torch.export.ExportedProgram) -> None:
    """What the program's graph reads from its own module (higher-order ops' graphs), shared
    as `GraphModule(ep.graph_module, graph)` shares it: a plain tensor as a buffer."""
    for node in ep.graph.nodes:
        if node.op in ("get_attr", "call_module"):
            obj = ep.graph_module
            for item in node.target.split("."):
                obj = getattr(obj, item)
            owner, field = _owner(gm, node.target)
            if isinstance(obj, torch.Tensor) and not isinstance(obj, torch.nn.Parameter):
                owner.register_buffer(field, obj)
            else:
                setattr(owner, field, obj)


def _unlift_state(graph: torch.fx.Graph, ep: torch.export.ExportedProgram,
                  copies: dict[Node, Node], found: dict[str, FoundWrite]) -> list[Node]:
    """Every parameter, constant and unplanned buffer input becomes a `get_attr` of its FQN
    where its input was (as `module()` does); returns the user inputs' placeholders."""
    specs = ep.graph_signature.input_specs
    user_inputs = []
    for spec, node in zip(specs, ep.graph.find_nodes(op="placeholder"), strict=False):
        ph = copies[node]
        if spec.kind is InputKind.USER_INPUT:
            user_inputs.append(ph)
        elif not (spec.kind is InputKind.BUFFER and spec.target in found):
            with graph.inserting_after(ph):
                attr = graph.get_attr(spec.target)
            ph.replace_all_uses_with(attr)
            attr.meta = ph.meta
            graph.erase_node(ph)
    return user_inputs


def _buffer_input(graph: torch.fx.Graph, ph: Node, fqn: str, anchor: Node | None,
                  tensor: torch.Tensor) -> Node:
    """Buffer `fqn`'s input `ph`, called `b_<fqn>` and moved after `anchor` (the last input so
    far; before everything when there is none)."""
    name = buffer_input_name(fqn)
    if ph.name != name:   # a constant planned as a buffer, or a name torch.export disambiguated
        with graph.inserting_after(ph):
            renamed = graph.placeholder(name)
        ph.replace_all_uses_with(renamed)
        renamed.meta = ph.meta
        graph.erase_node(ph)
        ph = renamed
    ph.target = name
    if anchor is not None:
        anchor.append(ph)
    else:
        first = next(iter(graph.nodes))
        if first is not ph:
            first.prepend(ph)
    if "val" not in ph.meta:
        ph.meta["val"] = torch.empty_like(tensor, device="meta")
    return ph


__all__ = ["liftable", "lift_program"]
