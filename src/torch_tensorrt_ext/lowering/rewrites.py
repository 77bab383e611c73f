"""Rewrites of an exported program, made as an ordered list on one copy of it.

A `Rewrite` is a name and two halves: `find(program)` reads the program and returns its sites
(`subgraphs.Site`: a graph's path and a node's name, which `subgraphs.copied` keeps) and changes
nothing; `apply(program, sites)` changes exactly the nodes `sites` names, in place, and returns
the program — the same object, or a new one over the same graph module where the signature must
name what the rewrite changed (`grad_blocks`).

`SAME_VALUE` is the list `stateful_compile.stateful_program` makes, in order: a negative `select`
index (`negative_indices`; torch-tensorrt drops a write to `buf[-1]`), a `cat` onto a legacy empty
tensor (`empty_cat`; it would stay on the host), the broadcast and dtype conversion of a `copy_`
or `fill_` value (`broadcast_writes`), a scatter-add over a dynamic length (`dynamic_scatters`;
torch-tensorrt would unroll it) and a buffer copied from a shared source (`copy_sources`;
`run_decompositions` refuses it). Each computes the same values as the graph it rewrites.

Invariant: `rewritten(program, rewrites)` never changes `program` (unless `owned`: the caller
made it for this call alone, and nothing else holds it). It calls each rewrite's `find` on the
program as the rewrites before it left it — a later rewrite sees the earlier ones' changes —
and, at the first rewrite with sites, copies `program` once (`program_edit.rebuilt` over
`subgraphs.copied`; none when `owned`) and finds that rewrite's sites again on the copy (a graph
module held under two names is one graph of `program` and two of the copy), then applies them
there. It returns the program — `program` itself when no rewrite found a site — and, per rewrite
that changed it, how many sites it changed.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from torch.export import ExportedProgram
from torch.fx import GraphModule

from .broadcast_writes import broadcast_write_sites, broadcast_write_values
from .copy_sources import own_copy_sources, shared_copy_sources
from .dynamic_scatters import accumulate_dynamic_scatters, dynamic_scatter_sites
from .empty_cat import drop_empty_cat_operands, empty_cat_sites
from .negative_indices import negative_index_sites, normalize_select_scatter
from .program_edit import rebuilt
from .subgraphs import Site, copied

__all__ = ["Rewrite", "Rewritten", "SAME_VALUE", "on_graphs", "rewritten"]

Sites = tuple[Site, ...]


@dataclasses.dataclass(frozen=True)
class Rewrite:
    name: str
    find: Callable[[ExportedProgram], Sites]
    apply: Callable[[ExportedProgram, Sites], ExportedProgram]


@dataclasses.dataclass(frozen=True)
class Rewritten:
    program: ExportedProgram
    counts: dict[str, int]   # rewrite name -> sites it changed, for each that changed any


def on_graphs(name: str, find: Callable[[GraphModule], Sites],
              apply: Callable[[GraphModule, Sites], None]) -> Rewrite:
    """A rewrite of the program's graph module (and the graphs below it) as one of the program."""
    return Rewrite(name, lambda program: find(program.graph_module),
                   _in_place(lambda program, sites: apply(program.graph_module, sites)))


def _in_place(apply: Callable[[ExportedProgram, Sites], None]
              ) -> Callable[[ExportedProgram, Sites], ExportedProgram]:
    def on_program(program: ExportedProgram, sites: Sites) -> ExportedProgram:
        apply(program, sites)
        return program
    return on_program


SAME_VALUE: tuple[Rewrite, ...] = (
    on_graphs("negative_indices", negative_index_sites, normalize_select_scatter),
    on_graphs("empty_cat", empty_cat_sites, drop_empty_cat_operands),
    on_graphs("broadcast_writes", broadcast_write_sites, broadcast_write_values),
    on_graphs("dynamic_scatters", dynamic_scatter_sites, accumulate_dynamic_scatters),
    Rewrite("copy_sources", shared_copy_sources, _in_place(own_copy_sources)),
)


def rewritten(program: ExportedProgram, rewrites: Sequence[Rewrite] = SAME_VALUE, *,
              owned: bool = False) -> Rewritten:
    counts: dict[str, int] = {}
    for rewrite in rewrites:
        sites = rewrite.find(program)
        if not sites:
            continue
        if not owned:
            program = rebuilt(program, graph_module=copied(program.graph_module))
            owned = True
            sites = rewrite.find(program)
        program = rewrite.apply(program, sites)
        counts[rewrite.name] = len(sites)
    return Rewritten(program, counts)
