"""A call added to a partition's graph, with the value it computes.

Invariant: `add_call(graph, target, *args, **kwargs)` inserts (at the graph's insertion point)
one `call_function` node of `target` whose `meta["val"]` is `target` run on its arguments' fake
values, in their own fake mode — so every value of a rewritten partition still carries a fake
tensor of the one mode torch-tensorrt traced it in (`lifted_program` and ExecuTorch's lowering
read them); on real tensor values it is computed on them, and without a tensor argument left
unset. The one helper the partition
rewrites (`prims_to_aten`, `kernel_forms`, `linear_weights`) add calls with.
"""
from __future__ import annotations

import contextlib

import torch
from torch.fx import Graph, Node

__all__ = ["add_call"]


def add_call(graph: Graph, target, *args, **kwargs) -> Node:
    from torch._guards import detect_fake_mode
    node = graph.call_function(target, args, kwargs)
    vals = torch.fx.map_arg((args, kwargs), lambda n: n.meta.get("val"))
    tensors = [v for v in torch.utils._pytree.tree_leaves(vals) if isinstance(v, torch.Tensor)]
    if tensors:
        with detect_fake_mode(tensors) or contextlib.nullcontext():
            node.meta["val"] = target(*vals[0], **vals[1])
    return node
