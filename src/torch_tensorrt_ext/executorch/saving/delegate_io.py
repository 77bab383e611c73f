"""Which engine bindings a partition's delegate inputs and outputs are.

Invariant: `delegate_input_bindings` names, for each delegate argument in order, the engine input
binding it feeds, and `delegate_output_bindings` the engine output bindings the delegate returns,
which must be in engine binding order (a `getitem(engine, k)` per output with `k` strictly
increasing); anything else is refused with `BlobError` naming the bindings.
"""
from __future__ import annotations

import operator

import torch
from torch.export.graph_signature import InputKind

from ...contracts.plan import PlanError

__all__ = ["delegate_input_bindings", "delegate_output_bindings", "single_engine_call"]


def single_engine_call(ep: torch.export.ExportedProgram, is_call) -> torch.fx.Node:
    """The one engine call (`is_call`) of a TensorRTBackend partition; refused otherwise."""
    calls = [n for n in ep.graph_module.graph.nodes if is_call(n)]
    if len(calls) != 1:
        raise PlanError(f"a TensorRTBackend partition holds exactly one engine call, "
                        f"found {len(calls)}")
    return calls[0]


def delegate_output_bindings(ep: torch.export.ExportedProgram, call: torch.fx.Node,
                             names: list[str]) -> list[str]:
    """The engine output bindings the partition returns; refuse an order other than the engine's."""
    out = []
    last = -1
    for v in ep.graph_module.graph.output_node().args[0]:
        if v is call and len(names) == 1:      # a one-output engine returned unwrapped
            out.append(names[0])
            continue
        if not (isinstance(v, torch.fx.Node) and v.target is operator.getitem
                and v.args[0] is call):
            raise PlanError(f"delegate output {getattr(v, 'name', v)!r} is not an output "
                            "binding of its engine")
        k = v.args[1]
        if k <= last:
            raise PlanError(
                f"delegate outputs are not in engine binding order: {names[k]!r} (binding {k}) "
                f"comes after {names[last]!r} (binding {last})")
        last = k
        out.append(names[k])
    return out


def delegate_input_bindings(ep: torch.export.ExportedProgram, call: torch.fx.Node,
                            names: list[str]) -> list[str]:
    """For each delegate input (the partition's user inputs, in order) the engine input binding
    it feeds; a value feeding two bindings, or an input feeding none, is refused."""
    args = list(call.args[0])
    if len(args) != len(names):
        raise PlanError(f"engine call {call.name!r} has {len(names)} input binding names "
                        f"{names} but {len(args)} engine inputs; the binding of each "
                        "delegate input cannot be established")
    placeholders = {n for n in ep.graph_module.graph.nodes if n.op == "placeholder"}
    stray = [getattr(a, "name", repr(a)) for a in args if a not in placeholders]
    if stray:
        raise PlanError(f"engine call {call.name!r}: its inputs {stray} are not delegate "
                        "runtime placeholders, so their argument positions are unknown")
    feeds = {}
    for arg, name in zip(args, names, strict=True):
        if arg in feeds:
            raise PlanError(f"engine call {call.name!r}: one value feeds input bindings "
                            f"{feeds[arg]!r} and {name!r}")
        feeds[arg] = name
    # the user inputs, read from the input specs (ExportGraphSignature.user_inputs is derived
    # from them)
    user = {s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT}
    out = []
    for ph in (n for n in ep.graph_module.graph.nodes if n.op == "placeholder" and n.name in user):
        if ph not in feeds:
            raise PlanError(f"delegate input {ph.name!r} feeds no binding of engine call "
                            f"{call.name!r}")
        out.append(feeds[ph])
    return out
