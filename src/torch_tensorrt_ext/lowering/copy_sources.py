"""A buffer copied whole from a value another write also makes a new value gets its own copy of it.

torch.export (2.14) keeps `buf.copy_(src)` in place in its training IR; functionalization
(`run_decompositions`, which torch-tensorrt's compile and ExecuTorch's `to_edge` both call) makes
the value `src` holds each such buffer's new value, as it is. When two writes end on one node —
two buffers copied from one input, one computed value, one parameter or one unwritten buffer, or
a buffer copied from another buffer's new value (`b.add_(1); a.copy_(b)`) — the functional program
returns that node twice among its mutations and `run_decompositions` refuses its own result:
`SpecViolationError: User output <src> is not in the correct order or is not found in the
exported program's user_output list` (valid programs refused; plain ExecuTorch refuses them the
same way).

A buffer copied whole from another buffer (`a.copy_(c)`) is lost further down the same way: its
new value is then the other buffer's own input, which the lifting takes for no write at all (the
save's verifier refuses the program, naming `a`).

Invariant: `shared_copy_sources(ep)` changes nothing and names (`subgraphs.Site`) each
whole-buffer `aten.copy_.default` of `ep`'s graph (its destination a placeholder, or a value that
is all of one — the same storage, shape, strides and offset, as `buf.float()` of a float buffer
is) whose source is shared — the source of an earlier such copy, a buffer's placeholder, a
placeholder some in-place op writes (each read through such an alias too), or the result of an
in-place op. `own_copy_sources(ep, sites)` gives exactly the copies `sites` names a `clone` of
their source made right before the copy, and changes nothing else: every value computed is the
same, each buffer's new value is then a node of its own. A copy from a value no other write ends
on (the common case: a ring buffer copied from its new `cat`) is no site, so no step pays for a
copy it does not need.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.multiprocessing.reductions import StorageWeakRef

from .subgraphs import Site, edit_sites

__all__ = ["own_copy_sources", "shared_copy_sources"]

_COPY = torch.ops.aten.copy_.default


def _writes_first_arg(node: Node) -> bool:
    """`node` is an in-place op: its schema writes its first argument (`add_`, `copy_`, ...)."""
    schema = getattr(node.target, "_schema", None)
    args = schema.arguments if schema is not None else ()
    return bool(args) and args[0].alias_info is not None and args[0].alias_info.is_write


def _layout(val) -> tuple | None:
    if not isinstance(val, torch.Tensor):
        return None
    # sizes may be symbolic (SymInts do not hash): their expressions name them
    return (StorageWeakRef(val.untyped_storage()).cdata, str(tuple(val.shape)),
            str(val.stride()), str(val.storage_offset()))


def _whole_placeholders(gm: GraphModule):
    """node -> the placeholder it is all of (itself for a placeholder), or None."""
    whole = {_layout(p.meta.get("val")): p for p in gm.graph.nodes if p.op == "placeholder"}
    whole.pop(None, None)
    return lambda n: (n if n.op == "placeholder" else whole.get(_layout(n.meta.get("val")))) \
        if isinstance(n, Node) else None


def shared_copy_sources(ep: torch.export.ExportedProgram) -> tuple[Site, ...]:
    gm: GraphModule = ep.graph_module
    buffers = set(ep.graph_signature.inputs_to_buffers)
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    whole_of = _whole_placeholders(gm)
    written = {whole_of(n.args[0]) for n in calls if _writes_first_arg(n) and n.args} - {None}
    seen: set[Node] = set()
    sites: list[Site] = []
    for n in calls:
        if n.target is not _COPY or whole_of(n.args[0]) is None \
                or not isinstance(n.args[1], Node):
            continue
        src = n.args[1]
        whole = whole_of(src) or src      # a placeholder read through an alias is that input
        shared = whole in seen or (whole.op == "placeholder" and (whole in written
                                                                  or whole.name in buffers)) or \
            (src.op == "call_function" and _writes_first_arg(src))
        seen.add(whole)
        if shared:
            sites.append(("", n.name))
    return tuple(sites)


def own_copy_sources(ep: torch.export.ExportedProgram, sites: tuple[Site, ...]) -> None:
    edit_sites(ep.graph_module, sites, _clone_source)


def _clone_source(gm: GraphModule, n: Node) -> None:
    src = n.args[1]
    with gm.graph.inserting_before(n):
        own = gm.graph.call_function(torch.ops.aten.clone.default, (src,))
    val = src.meta.get("val")
    if isinstance(val, torch.Tensor):
        mode = getattr(val, "fake_mode", None)
        if mode is not None:
            with mode:
                own.meta["val"] = val.clone()
        else:
            own.meta["val"] = val.clone()
    n.args = (n.args[0], own, *n.args[2:])
