"""`cat` operands that are legacy empty tensors removed before torch-tensorrt lowers a graph.

`torch.cat` skips a 1-D tensor of shape [0] whatever the other operands' rank (a legacy rule);
transformers' `DynamicLayer` starts its cache as such a tensor (`torch.tensor([])`) and the first
update is `cat([empty, keys], dim=-2)` — every seq2seq decoder's cross-attention cache (T5,
BART, Whisper). torch-tensorrt's converter refuses the mixed ranks, so the `cat` stayed in
PyTorch and the empty tensor became a constant of the saved program; when a program's constants
are all empty, ExecuTorch 1.5.1 writes no constant segment and its runtime then refuses to load
the program ("constant_buffer path is disabled").

Invariant: `drop_empty_cat_operands(gm)` removes, in place and in every graph of `gm`
(`subgraphs.graphs`: a higher-order op's body too), every operand of an `aten.cat`
whose value is a 1-D tensor of static size 0 when another operand has a different rank — the
same values (torch.cat skips them) — and then every node left without users that only read such
an operand (`detach`, `detach_`, `alias`, `clone`); it returns how many operands it removed.
It changes nothing else; with `apply=False` it only counts them.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from .subgraphs import graphs

__all__ = ["drop_empty_cat_operands"]

_CAT = torch.ops.aten.cat.default
_PASS_THROUGH = {torch.ops.aten.detach.default, torch.ops.aten.detach_.default,
                 torch.ops.aten.alias.default, torch.ops.aten.clone.default}


def _legacy_empty(n: object) -> bool:
    val = getattr(n, "meta", {}).get("val")
    return isinstance(val, torch.Tensor) and tuple(val.shape) == (0,)


def _rank(n: object) -> int:
    val = getattr(n, "meta", {}).get("val")
    return val.dim() if isinstance(val, torch.Tensor) else -1


def _drop_dead_readers(node: Node) -> None:
    while node.op == "call_function" and node.target in _PASS_THROUGH and not node.users:
        source = node.args[0]
        node.graph.erase_node(node)
        if not isinstance(source, Node):
            return
        node = source


def drop_empty_cat_operands(gm: GraphModule, apply: bool = True) -> int:
    return sum(_drop(g, apply) for g in graphs(gm))


def _drop(gm: GraphModule, apply: bool) -> int:
    removed = 0
    for n in list(gm.graph.find_nodes(op="call_function", target=_CAT)):
        operands = list(n.args[0])
        kept = [a for a in operands if not _legacy_empty(a)]
        if not kept or len(kept) == len(operands) or \
                all(_rank(a) == _rank(kept[0]) for a in operands):
            continue
        removed += len(operands) - len(kept)
        if not apply:
            continue
        n.args = (kept, *n.args[1:])
        for a in operands:
            if a not in kept and isinstance(a, Node):
                _drop_dead_readers(a)
    if removed and apply:
        gm.graph.lint()
        gm.recompile()
    return removed
