"""fx's index of who reads each node (`Node.users`) made to agree with the nodes' arguments
again before any pass reads it.

A node's arguments are the program; its `users` is an index fx keeps beside them, which
dead-code elimination, `replace_all_uses_with` and every "has no readers" test trust.
torch.export (2.14) leaves the index wrong in one case users meet: a non-strict export under
`torch.no_grad()` — as ExecuTorch's export API (its export stage) and its export scripts always
export — of a program with a `with torch.no_grad():` block. The block's grad mode is then the
ambient one, so export inlines it back (`torch._export.utils.node_inline_`), and for a block of
one result it clears *every* reader of that result, the block's own nodes included: the
`copy_` writing the value into a buffer (`self.flag.copy_(h > 0)`) no longer counts as its
reader. torch-tensorrt's lowering cleans the graph with fx's dead-code elimination
(`remove_assert_nodes`), which then deletes the value while the write still reads it, and the
save was refused ("Argument 'gt' of Node 'copy_' was used before it has been defined").

Invariant: `broken_users(gm)` changes nothing and names (`subgraphs.Site`) each node, in every
graph of `gm`, that reads an input whose `users` does not hold it, or whose own `users` holds a
node that does not read it or is no longer in the graph. `with_node_users(program)` is `program`
itself when no graph of it has such a node, else a new program (`program_edit.rebuilt`) over a
copy of its graphs (`subgraphs.copied`: fx's graph copy makes each node from its arguments, so
every index is built anew from them and none is left); `program` is left as it was. The
arguments decide: no node, argument or value changes.
"""
from __future__ import annotations

from torch.export import ExportedProgram
from torch.fx import GraphModule, Node

from .program_edit import rebuilt
from .subgraphs import Site, copied, sites_in

__all__ = ["broken_users", "with_node_users"]


def broken_users(gm: GraphModule) -> tuple[Site, ...]:
    return sites_in(gm, lambda g: _disagreeing(list(g.graph.nodes)))


def _disagreeing(nodes: list[Node]) -> list[Node]:
    present = set(nodes)
    return [n for n in nodes
            if any(n not in a.users for a in n.all_input_nodes)
            or any(u not in present or n not in u.all_input_nodes for u in n.users)]


def with_node_users(program: ExportedProgram) -> ExportedProgram:
    if not broken_users(program.graph_module):
        return program
    return rebuilt(program, graph_module=copied(program.graph_module))
