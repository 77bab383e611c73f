"""A partition whose only effect is a cache write TensorRT aliases is left to PyTorch.

An op PyTorch runs (`torch_executed_ops`, or one TensorRT has no converter for)
just before a KV-cache write that nothing after reads puts the write in an engine of its own. Its
only output is the cache's aliased new value, which the engine writes into the buffer in place —
the program reads none of its outputs. The compiled module runs it, but ExecuTorch cannot lower a
delegate none of whose outputs is read (fx's `insert_subgm` asserts), so such a program could not
be saved (the save refused it, naming the buffer).

Invariant: after `write_only_partitions_to_torch(parent)`, no accelerated partition of `parent`
(`_run_on_acc<n>`) has every output aliased (`kv_rules.aliased_in_partition`, the rule the
engines follow) and none read as a value by the parent (each only a buffer's write-back, held
once by the output); each such partition is renamed `_run_on_gpu<n>` — module and call — which
torch-tensorrt's fast partitioner leaves to PyTorch, as it leaves a partition below
`min_block_size`. The write is then the program's own (a kernel in a `.pte`), planned and
reconciled like any write PyTorch runs. Nothing else changes; the renamed partitions' names are
returned.
"""
from __future__ import annotations

import operator
from collections import Counter

import torch
from torch.fx import GraphModule, Node

from .partition_outputs import aliased_outputs, read_as_value

__all__ = ["write_only_partitions_to_torch"]

_ACC, _TORCH = "_run_on_acc", "_run_on_gpu"


def _write_only(call: Node, sub: GraphModule, held: Counter) -> bool:
    outs = sub.graph.output_node().args[0]
    one = not isinstance(outs, (tuple, list))     # a partition returning one value, untupled
    outs = (outs,) if one else outs
    if not outs or not all(aliased_outputs(sub, outs)):
        return False
    if one:   # the call is the value: read unless only the output holds it, once
        return held[call] <= 1 and all(u.op == "output" for u in call.users)
    return all(u.target is operator.getitem for u in call.users) and \
        not any(read_as_value(call, k, held) for k in range(len(outs)))


def write_only_partitions_to_torch(parent: GraphModule) -> list[str]:
    held: Counter = Counter()
    torch.fx.node.map_arg(parent.graph.output_node().args, lambda n: held.update((n,)))
    renamed = []
    for call in [n for n in parent.graph.nodes
                 if n.op == "call_module" and str(n.target).startswith(_ACC)]:
        sub = getattr(parent, call.target)
        if not isinstance(sub, GraphModule) or not _write_only(call, sub, held):
            continue
        name = _TORCH + str(call.target)[len(_ACC):]
        parent.add_submodule(name, sub)
        delattr(parent, call.target)
        call.target = name
        call._rename(name)
        renamed.append(name)
    if renamed:
        parent.graph.lint()
        parent.recompile()
    return renamed
