"""`with torch.no_grad():` blocks (and disabled `torch.autocast` ones) inlined into the graph
that calls them.

torch.export's training IR keeps a grad-mode block as a higher-order op,
`wrap_with_set_grad_enabled(enabled, body, *operands)`, whose body is a graph module of its own.
A buffer written inside one (an EMA or a running statistic updated under `no_grad`, ExecuTorch's
LFM2 and Qwen3.5 layers) is then out of reach of every pass that reads the program's in-place
writes from its graph — the constant-to-buffer promotion, the same-value rewrites
(`negative_indices`, `broadcast_writes`, `empty_cat`, `copy_sources`): two buffers copied from one
input inside a block were refused by functionalization, a write to `buf[-1]` inside one failed.
Grad mode changes no value a program computes, and a compiled program is never differentiated,
so the block's nodes can stand in the graph itself: every later pass then sees the writes as it
sees those of a program written without the block.

A disabled autocast block (`torch.autocast(..., enabled=False)`) is kept the same way, as
`wrap_with_autocast`, and changes no value where no enabled autocast surrounds it: it is inlined
too (an enabled one casts, and is left to functionalization).

Invariant: `without_grad_blocks(ep)` is `ep` itself when its graph calls no such block, else a
new program (`rewrites.rewritten` of `GRAD_BLOCKS`: `ep`'s graphs copied, `ep` left as it was),
the blocks inlined by `inline_grad_blocks`, and each output spec naming the node now in its place
of the graph's output (an output the block computed is the inlined node); nothing else differs.
`grad_block_sites(gm)` changes nothing and names (`subgraphs.Site`) each inlinable
`wrap_with_set_grad_enabled` call, and each `wrap_with_autocast` call with `enabled=False`, of
`gm`'s own graph. `inline_grad_blocks(gm, sites)` replaces each call `sites` names — and then
each such call the inlined bodies brought into `gm`'s graph, until none is left — by copies of
its body's nodes (the body's placeholders read as the call's operands, each `getitem` of the call
as the body's output at that index), moves a nested body's own graph modules onto `gm` under
unused names, drops the inlined body (its `get_attr`, and the attribute when nothing else reads
it) and changes nothing else: the same ops on the same values, in the same order. A call whose
result is read other than item by item, or whose body is not a graph module of `gm` or reads
another attribute than a graph module, is no site and is left as it is (functionalized later,
as any higher-order op taking a buffer is). Unlike the other rewrites its apply goes past its
sites: the nested blocks are in the bodies' graphs, not `gm`'s, until their parent is inlined.
"""
from __future__ import annotations

import dataclasses
import operator

import torch
from torch.export.graph_signature import SymIntArgument, TensorArgument
from torch.fx import GraphModule, Node

from .program_edit import rebuilt
from .rewrites import Rewrite, rewritten
from .subgraphs import Site

__all__ = ["GRAD_BLOCKS", "grad_block_sites", "inline_grad_blocks", "without_grad_blocks"]

# block op -> (where its body is among the call's arguments, whether a call may be inlined):
# a grad-mode block always (grad mode changes no value); an autocast block only disabled
# (`torch.autocast(..., enabled=False)`, as transformers' rotary embeddings write it) — inlined
# where no enabled autocast surrounds it (the program's own graph, or a body inlined into it),
# it changes no value either; an enabled one casts, and stays
_BLOCKS = {
    torch.ops.higher_order.wrap_with_set_grad_enabled: (1, lambda args: True),
    torch.ops.higher_order.wrap_with_autocast: (4, lambda args: args[2] is False),
}


def _calls(gm: GraphModule) -> list[Node]:
    return [c for op in _BLOCKS for c in gm.graph.find_nodes(op="call_function", target=op)
            if _inlinable(gm, c)]


def grad_block_sites(gm: GraphModule) -> tuple[Site, ...]:
    return tuple(("", c.name) for c in _calls(gm))


def inline_grad_blocks(gm: GraphModule, sites: tuple[Site, ...]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    calls = [nodes[name] for path, name in sites if not path]
    while calls:
        for call in calls:
            _inline(gm, call)
        calls = _calls(gm)       # the blocks nested in those just inlined
    gm.graph.lint()
    gm.recompile()


def _inlined(ep: torch.export.ExportedProgram, sites: tuple[Site, ...]
             ) -> torch.export.ExportedProgram:
    gm = ep.graph_module
    inline_grad_blocks(gm, sites)
    outs = gm.graph.output_node().args[0]
    specs = [dataclasses.replace(spec, arg=type(spec.arg)(name=out.name))
             if isinstance(spec.arg, (TensorArgument, SymIntArgument)) and isinstance(out, Node)
             else spec for spec, out in zip(ep.graph_signature.output_specs, outs, strict=True)]
    return rebuilt(ep, graph_module=gm, output_specs=specs)


GRAD_BLOCKS = Rewrite("grad_blocks", lambda ep: grad_block_sites(ep.graph_module), _inlined)


def without_grad_blocks(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    return rewritten(ep, (GRAD_BLOCKS,)).program


def _inlinable(gm: GraphModule, call: Node) -> bool:
    """The call's body is a graph module of `gm` taking one operand per placeholder and reading
    no attribute but graph modules (nested blocks' bodies), and the call's result is only read
    item by item (as torch.export writes it)."""
    at, may = _BLOCKS[call.target]
    node = call.args[at] if len(call.args) > at else None
    body = getattr(gm, node.target, None) if isinstance(node, Node) and node.op == "get_attr" \
        else None
    if not isinstance(body, GraphModule) or not may(call.args):
        return False
    phs = body.graph.find_nodes(op="placeholder")
    attrs = body.graph.find_nodes(op="get_attr")
    return len(phs) == len(call.args) - at - 1 and \
        all(isinstance(getattr(body, a.target, None), GraphModule) for a in attrs) and \
        all(u.op == "call_function" and u.target is operator.getitem for u in call.users)


def _inline(gm: GraphModule, call: Node) -> None:
    at = _BLOCKS[call.target][0]
    body_node, operands = call.args[at], call.args[at + 1:]
    body: GraphModule = getattr(gm, body_node.target)
    env: dict[Node, object] = dict(zip(body.graph.find_nodes(op="placeholder"), operands,
                                       strict=True))
    result = None
    with gm.graph.inserting_before(call):
        for n in body.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                result = torch.fx.node.map_arg(n.args[0], env.__getitem__)
                continue
            if n.op == "get_attr":     # a nested block's body: onto gm, under a free name
                env[n] = gm.graph.get_attr(_adopt(gm, getattr(body, n.target), n.target))
                env[n].meta = dict(n.meta)
                continue
            env[n] = gm.graph.node_copy(n, env.__getitem__)
    outs = result if isinstance(result, (tuple, list)) else (result,)
    for user in list(call.users):
        user.replace_all_uses_with(outs[user.args[1]])
        gm.graph.erase_node(user)
    gm.graph.erase_node(call)
    if not body_node.users:
        gm.graph.erase_node(body_node)
        if not gm.graph.find_nodes(op="get_attr", target=body_node.target):
            delattr(gm, body_node.target)


def _adopt(gm: GraphModule, module: torch.nn.Module, name: str) -> str:
    free, i = name, 0
    while hasattr(gm, free):
        i += 1
        free = f"{name}_{i}"
    gm.add_submodule(free, module)
    return free
