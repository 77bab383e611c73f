"""Which engine bindings a partition's delegate inputs and outputs are.

Invariant: `delegate_input_bindings` names, for each delegate argument in order, the engine input
binding it feeds, and `delegate_output_bindings` the engine output bindings the delegate returns,
which must be in engine binding order (a `getitem(engine, k)` per output with `k` strictly
increasing); anything else is refused with `BlobError` naming the bindings.
"""
from __future__ import annotations

import operator

import torch

from ..contracts import blob as blobfmt

__all__ = ["delegate_input_bindings", "delegate_output_bindings", "single_engine_call"]


def single_engine_call(ep: torch.export.ExportedProgram, is_call) -> torch.fx.Node:
    """The one engine call (`is_call`) of a TensorRTBackend partition; refused otherwise."""
    calls = [n for n in ep.graph.nodes if is_call(n)]
    if len(calls) != 1:
        raise blobfmt.BlobError(f"a TensorRTBackend partition holds exactly one engine call, "
                                f"found {len(calls)}")
    return calls[0]


def delegate_output_bindings(ep: torch.export.ExportedProgram, call: torch.fx.Node,
                             names: list[str]) -> list[str]:
    """The engine output bindings the partition returns; refuse an order other than the engine's."""
    out = []
    last = -1
    for v in ep.graph.output_node().args[0]:
        if not (isinstance(v, torch.fx.Node) and v.target is operator.getitem
                and v.args[0] is call):
            raise blobfmt.BlobError(f"delegate output {getattr(v, 'name', v)!r} is not an output "
                                    "binding of its engine")
        k = v.args[1]
        if k <= last:
            raise blobfmt.BlobError(
                f"delegate outputs are not in engine binding order: {names[k]!r} (binding {k}) "
                f"comes after {names[last]!r} (binding {last})")
        last = k
        out.append(names[k])
    return out


def delegate_input_bindings(ep: torch.export.ExportedProgram, call: torch.fx.Node,
                            names: list[str]) -> list[str]:
    """For each delegate input (the partition's user inputs, in order) the engine input binding
    it feeds; a value feeding two bindings, or an input feeding none, is refused."""
    feeds = {}
    for i, arg in enumerate(call.args[0]):
        if arg in feeds:
            raise blobfmt.BlobError(f"engine call {call.name!r}: one value feeds input bindings "
                                    f"{feeds[arg]!r} and {names[i]!r}")
        feeds[arg] = names[i]
    user = set(ep.graph_signature.user_inputs)
    out = []
    for ph in (n for n in ep.graph.nodes if n.op == "placeholder" and n.name in user):
        if ph not in feeds:
            raise blobfmt.BlobError(f"delegate input {ph.name!r} feeds no binding of engine call "
                                    f"{call.name!r}")
        out.append(feeds[ph])
    return out
