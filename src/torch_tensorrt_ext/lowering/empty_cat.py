"""`cat` operands that are legacy empty tensors removed before torch-tensorrt lowers a graph.

`torch.cat` skips a 1-D tensor of shape [0] whatever the other operands' rank (a legacy rule);
transformers' `DynamicLayer` starts its cache as such a tensor (`torch.tensor([])`) and the first
update is `cat([empty, keys], dim=-2)` — every seq2seq decoder's cross-attention cache (T5,
BART, Whisper). torch-tensorrt's converter refuses the mixed ranks, so the `cat` stayed in
PyTorch and the empty tensor became a constant of the saved program; when a program's constants
are all empty, ExecuTorch 1.5.1 writes no constant segment and its runtime then refuses to load
the program ("constant_buffer path is disabled").

Invariant: `empty_cat_sites(gm)` changes nothing and names (`subgraphs.Site`), in every graph
of `gm` (`subgraphs.graphs`: a higher-order op's body too), each `aten.cat` with an operand whose
value is a 1-D tensor of static size 0 while another operand has a different rank.
`drop_empty_cat_operands(gm, sites)` removes, in place, those operands of exactly the cats
`sites` names — the same values (torch.cat skips them) — and then every node left without users
that only read such an operand (`detach`, `detach_`, `alias`, `clone`); it changes nothing else.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from .subgraphs import Site, edit_sites, sites_in

__all__ = ["drop_empty_cat_operands", "empty_cat_sites"]

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


def _drops(n: Node) -> bool:
    operands = list(n.args[0])
    kept = [a for a in operands if not _legacy_empty(a)]
    return bool(kept) and len(kept) != len(operands) and \
        not all(_rank(a) == _rank(kept[0]) for a in operands)


def empty_cat_sites(gm: GraphModule) -> tuple[Site, ...]:
    return sites_in(gm, lambda g: [n for n in g.graph.find_nodes(op="call_function", target=_CAT)
                                   if _drops(n)])


def drop_empty_cat_operands(gm: GraphModule, sites: tuple[Site, ...]) -> None:
    def change(_g: GraphModule, n: Node) -> None:
        operands = list(n.args[0])
        kept = [a for a in operands if not _legacy_empty(a)]
        n.args = (kept, *n.args[1:])
        for a in operands:
            if a not in kept and isinstance(a, Node):
                _drop_dead_readers(a)
    edit_sites(gm, sites, change)
