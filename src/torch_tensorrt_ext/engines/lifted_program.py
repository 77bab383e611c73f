"""The ExportedProgram of a reference engine's partition, made without tracing it again.

Invariant: for a partition `edge_replay` can replay — placeholders, tensor attributes, calls of
non-mutating ATen (or custom) operators and outputs, every value a fake tensor of the one fake
mode torch-tensorrt traced the partition in — `lifted_program(gm)` is the program
`torch.export.export(gm, example_args(gm))` makes of it: the partition's placeholders as the
user inputs in order; each tensor attribute it reads lifted to a placeholder ahead of them
(parameters, then buffers, then other tensors, each in first-use order, as export lifts them);
the same calls on the same values; the partition's outputs as the user outputs. The values keep
the fake tensors the partition carries, so nothing is traced a second time. Anything else gets
None and the caller exports the partition.
"""
from __future__ import annotations

import copy
import operator

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.export import ExportedProgram
from torch.export.exported_program import ModuleCallEntry, ModuleCallSignature
from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec, OutputKind,
                                          OutputSpec, TensorArgument)
from torch.fx import Graph, GraphModule, Node
from torch.utils import _pytree as pytree

__all__ = ["lifted_program"]


def _fake_mode(gm: GraphModule):
    """The one fake mode every value of `gm` is a tensor of, or None."""
    modes = set()
    for n in gm.graph.nodes:
        if n.op == "output" or (n.op == "get_attr" and "val" not in n.meta):
            continue
        vals = n.meta.get("val")
        vals = vals if isinstance(vals, (list, tuple)) else (vals,)
        if not all(isinstance(v, FakeTensor) for v in vals):
            return None
        modes |= {v.fake_mode for v in vals}
    return modes.pop() if len(modes) == 1 else None


def _liftable_fake_mode(gm: GraphModule):
    """The fake mode of `gm`'s values when `gm` can be lifted without tracing, else None."""
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            ok = isinstance(_attr(gm, n.target), torch.Tensor)
        elif n.op == "call_function":   # values are checked on the program (`replayable`)
            ok = n.target is operator.getitem or (
                isinstance(n.target, torch._ops.OpOverload) and not n.target._schema.is_mutable)
        elif n.op == "output":
            ok = isinstance(n.args[0], (tuple, list)) and all(
                isinstance(a, Node) for a in n.args[0])
        else:
            ok = n.op == "placeholder"
        if not ok:
            return None
    return _fake_mode(gm)


def _attr(gm: GraphModule, target: str):
    return operator.attrgetter(target)(gm)


_KIND_PREFIX = {InputKind.PARAMETER: "p_", InputKind.BUFFER: "b_",
                InputKind.CONSTANT_TENSOR: "c_"}


def _attributes(gm: GraphModule) -> list[tuple[str, InputKind, bool]]:
    """(target, kind, persistent) of each tensor attribute `gm` reads, in export's lifting
    order."""
    buffers = dict(gm.named_buffers(remove_duplicate=False))
    non_persistent = {f"{p}.{b}" if p else b for p, m in gm.named_modules()
                      for b in getattr(m, "_non_persistent_buffers_set", ())}
    seen: dict[str, tuple[InputKind, bool]] = {}
    for n in gm.graph.nodes:
        if n.op == "get_attr" and n.target not in seen:
            t = _attr(gm, n.target)
            kind = (InputKind.PARAMETER if isinstance(t, torch.nn.Parameter) else
                    InputKind.BUFFER if n.target in buffers else InputKind.CONSTANT_TENSOR)
            seen[n.target] = (kind, n.target not in non_persistent)
    order = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
    return sorted(((t, k, p) for t, (k, p) in seen.items()), key=lambda a: order.index(a[1]))


def _lift(gm: GraphModule, g: Graph, fake_mode, env: dict[Node, Node]):
    """Placeholders for the attributes, then the user inputs; returns (input specs, state dict,
    constants, user input placeholders) and fills `env` for every placeholder and get_attr node
    of `gm`."""
    specs, state, constants, by_target, user = [], {}, {}, {}, []
    attr_vals = {n.target: n.meta["val"] for n in gm.graph.nodes
                 if n.op == "get_attr" and "val" in n.meta}
    for target, kind, persistent in _attributes(gm):
        t = _attr(gm, target)
        p = by_target[target] = g.placeholder(_KIND_PREFIX[kind] + target.replace(".", "_"))
        p.meta["val"] = (attr_vals[target] if target in attr_vals
                         else fake_mode.from_tensor(t, static_shapes=True))
        in_state = kind == InputKind.PARAMETER or (kind == InputKind.BUFFER and persistent)
        (state if in_state else constants)[target] = t
        specs.append(InputSpec(kind, TensorArgument(p.name), target,
                               persistent=persistent if kind == InputKind.BUFFER else None))
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            env[n] = by_target[n.target]
        elif n.op == "placeholder":
            env[n] = p = g.placeholder(n.name)
            p.meta = copy.copy(n.meta)
            specs.append(InputSpec(InputKind.USER_INPUT, TensorArgument(p.name), None))
            user.append(p)
    return specs, state, constants, user


def lifted_program(gm: GraphModule) -> ExportedProgram | None:
    """`torch.export.export(gm, example_args(gm))` without tracing (module docstring), or None
    where `gm` is not a partition `edge_replay` can replay."""
    fake_mode = _liftable_fake_mode(gm)
    if fake_mode is None:
        return None
    g, env = Graph(), {}
    input_specs, state, constants, user = _lift(gm, g, fake_mode, env)
    for n in gm.graph.nodes:
        if n.op == "call_function":
            env[n] = g.node_copy(n, env.__getitem__)
    outputs = [env[a] for a in gm.graph.output_node().args[0]]
    g.output(tuple(outputs))
    call = ModuleCallSignature(   # export names no root inputs/outputs here, only their specs
        inputs=[], outputs=[],
        in_spec=pytree.tree_flatten((tuple(p.meta["val"] for p in user), {}))[1],
        out_spec=pytree.tree_flatten(tuple(outputs))[1],
        forward_arg_names=[p.name for p in user])
    module = GraphModule(torch.nn.Module(), g)
    return ExportedProgram(
        root=module, graph=module.graph,
        graph_signature=ExportGraphSignature(input_specs=input_specs, output_specs=[
            OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(o.name), None) for o in outputs]),
        state_dict=state, range_constraints={}, constants=constants,
        module_call_graph=[ModuleCallEntry("", call)])
