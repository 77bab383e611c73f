"""Each partition's outputs in an order torch-tensorrt's engine module returns in full.

torch-tensorrt 2.14.0's engine module returns its outputs up to the last one that is not in
`aliased_io` (`user_output_count`): the interpreter appends the aliased outputs a partition does
not return after the ones it does, and the module hides that suffix. A cache write the partition
*does* return — a KV cache handed to the caller after its write, or read by a later partition —
is aliased too, and when it is the partition's last output the module dropped it: the graph's
read of it could not be served (`module_form.engine_results_as_returned` refused the program).

Invariant: after `aliased_outputs_returned(partitioned)`, the last output of every accelerated
partition (`_run_on_acc*`) that has an output TensorRT does not alias is one of those
(`kv_rules.aliased_in_partition`, the rule the reference builder reads too), so the module's
count covers every output the graph reads; a partition whose outputs are all aliased is
returned whole by that count already. The partition's output tuple, the parent's reads of it
(`getitem` indices) and the call's `val` are permuted together; no value changes, and a
partition that needs no move is left as it is.
"""
from __future__ import annotations

import operator

from torch.fx import GraphModule, Node

from ..contracts.plan import PlanError
from ..lowering.kv_rules import aliased_in_partition

__all__ = ["aliased_outputs_returned"]


def _new_order(sub: GraphModule) -> list[int] | None:
    """Old output positions in their new order, or None when the order already serves."""
    outs = sub.graph.output_node().args[0]
    if not isinstance(outs, (tuple, list)) or len(outs) < 2:
        return None
    inputs = {n for n in sub.graph.nodes if n.op == "placeholder"}
    order = {n: i for i, n in enumerate(sub.graph.nodes)}
    aliased = [isinstance(o, Node) and aliased_in_partition(o, inputs, order) for o in outs]
    if not aliased[-1] or all(aliased):
        return None
    last_plain = max(i for i, a in enumerate(aliased) if not a)
    return [i for i in range(len(outs)) if i != last_plain] + [last_plain]


def aliased_outputs_returned(parent: GraphModule) -> None:
    """Reorder the outputs of `parent`'s accelerated partitions where the engine module would
    drop an aliased output the graph reads (see the module's invariant)."""
    changed = False
    for call in [n for n in parent.graph.nodes
                 if n.op == "call_module" and "_run_on_acc" in str(n.target)]:
        sub = getattr(parent, call.target)
        if not isinstance(sub, GraphModule) or (perm := _new_order(sub)) is None:
            continue
        readers = list(call.users)
        if any(u.target is not operator.getitem for u in readers):
            raise PlanError(f"partition {call.target!r}: its results are read other than by "
                            "index; please report this with the program")
        out_node = sub.graph.output_node()
        outs = out_node.args[0]
        out_node.args = (tuple(outs[i] for i in perm),)
        sub.recompile()
        position = {old: new for new, old in enumerate(perm)}
        for use in readers:
            use.args = (call, position[use.args[1]])
        val = call.meta.get("val")
        if isinstance(val, (tuple, list)) and len(val) == len(perm):
            call.meta["val"] = type(val)(val[i] for i in perm)
        changed = True
    if changed:
        parent.graph.lint()
        parent.recompile()
