"""Each partition's outputs in an order torch-tensorrt's engine module returns in full.

torch-tensorrt 2.14.0's engine module returns its outputs up to the last one that is not in
`aliased_io` (`user_output_count`): the interpreter appends the aliased outputs a partition does
not return after the ones it does, and the module hides that suffix. A cache write the partition
*does* return — a KV cache handed to the caller after its write, or read by a later partition —
is aliased too, and when it is the partition's last output the module dropped it: the graph's
read of it could not be served (`module_form.engine_results_as_returned` refused the program).

Invariant: after `aliased_outputs_returned(partitioned)`, every output of an accelerated
partition (`_run_on_acc*`) that TensorRT aliases (`kv_rules.aliased_in_partition`, the rule the
reference builder reads too) and the parent reads as a value — a node other than the output uses
it, or the output holds it twice: to the caller and as the buffer's new value — comes before the
partition's last plain output, so the module's count returns it. Only a partition that needs it
is reordered: its outputs in their order with the last plain one moved after the others, then
the aliased outputs that are only a buffer's write-back (hidden, as before; the engine writes the
buffer in place). A partition whose outputs are all aliased is returned whole already. The
partition's output tuple, the parent's reads of it (`getitem` indices) and the call's `val` are
permuted together; no value changes.
"""
from __future__ import annotations

import operator
from collections import Counter

import torch
from torch.fx import GraphModule, Node

from ..lowering.kv_rules import aliased_in_partition

__all__ = ["aliased_outputs", "aliased_outputs_returned", "read_as_value"]


def read_as_value(call: Node, k: int, held: Counter) -> bool:
    """Whether the parent reads result `k` of `call` as a value: a node other than the output
    uses it, or the output holds it more than once (`held`: how often the output holds each
    node; returned to the caller *and* as the buffer's new value). Held once by the output, it is
    only the buffer's write-back, which an aliased write needs no longer (the engine writes the
    buffer in place)."""
    return any(use.args[1] == k and (held[use] > 1 or any(u.op != "output" for u in use.users))
               for use in call.users)


def aliased_outputs(sub: GraphModule, outs) -> list[bool]:
    """Per output of partition `sub` (`outs`, its output node's values): whether TensorRT
    aliases it (`kv_rules.aliased_in_partition`, the rule the engines follow)."""
    inputs = {n for n in sub.graph.nodes if n.op == "placeholder"}
    order = {n: i for i, n in enumerate(sub.graph.nodes)}
    return [isinstance(o, Node) and aliased_in_partition(o, inputs, order) for o in outs]


def _new_order(call: Node, sub: GraphModule, held: Counter) -> list[int] | None:
    """Old output positions in their new order, or None when the module returns every aliased
    output the parent reads already."""
    outs = sub.graph.output_node().args[0]
    if not isinstance(outs, (tuple, list)) or len(outs) < 2:
        return None
    aliased = aliased_outputs(sub, outs)
    if all(aliased):
        return None                    # the module returns every output (`user_output_count`)
    returned = max(i for i, a in enumerate(aliased) if not a) + 1
    read = {k for k in range(len(outs)) if aliased[k] and read_as_value(call, k, held)}
    if all(k < returned for k in read):
        return None
    hidden = [k for k in range(len(outs)) if aliased[k] and k not in read]
    kept = [k for k in range(len(outs)) if k not in hidden]
    last_plain = max(k for k in kept if not aliased[k])
    return [k for k in kept if k != last_plain] + [last_plain] + hidden


def aliased_outputs_returned(parent: GraphModule) -> None:
    """Reorder the outputs of `parent`'s accelerated partitions where the engine module would
    drop an aliased output the graph reads (see the module's invariant)."""
    changed, held = False, Counter()
    torch.fx.node.map_arg(parent.graph.output_node().args, lambda n: held.update((n,)))
    for call in [n for n in parent.graph.nodes
                 if n.op == "call_module" and "_run_on_acc" in str(n.target)]:
        sub = getattr(parent, call.target)
        if not isinstance(sub, GraphModule):
            continue
        readers = list(call.users)
        if any(u.target is not operator.getitem for u in readers):
            continue   # a partition returning one value: no tuple to reorder
        if (perm := _new_order(call, sub, held)) is None:
            continue
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
