"""The lifted graph and the pieces of lifting it (`lift`) that other layers share.

Invariant: in a lifted graph (`lift.lift_writes`) each planned buffer ends up the same:
an input called `b_<fqn with dots as underscores>` (`buffer_input_name`), and an output holding
its new value in the form `buffer_value` gives it — a KV `index_put` in its converter form, a
COPY_BACK cache write marked so no converter aliases it — and holds its buffer row-major
(`row_major`: its initial value and the input's `meta["val"]`), whatever the layout the module
registered (a transposed or expanded buffer). The writes lifted are exactly the
plan's (`planned`), and the lifted module generates its Python code when first used
(`recompile_lazily`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Iterable, Sequence

import torch
from torch.fx import GraphModule, Node

from ..contracts.plan import BufferWrite, MutationPlan, PlanError, WriteKind
from .graph_writes import FoundWrite
from .index_put_kv import INDEX_PUT, kv_form, rewrite
from .kv_rules import INDEX_COPY, NO_KV_ALIAS_MARKER, SLICE_SCATTER


@dataclass(frozen=True)
class LiftedGraph:
    """A lifted GraphModule plus the by-name pairing of buffers with its inputs and outputs.

    Calling `gm(*user_inputs, *[buffer for each buffer_inputs entry])` returns
    `(*user_outputs, *new buffer values)`; `buffer_outputs` says which output holds which
    buffer's new value.
    """

    gm: GraphModule
    plan: MutationPlan
    user_inputs: tuple[str, ...]
    buffer_inputs: tuple[tuple[str, str], ...]    # (fqn, placeholder name)
    buffer_outputs: tuple[tuple[str, int], ...]   # (fqn, output index)
    num_user_outputs: int
    initial_values: tuple[tuple[str, torch.Tensor], ...]
    # the three pairings by FQN, built once (a lookup per buffer stays O(1))
    _by_fqn: tuple[dict, dict, dict] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_fqn", (dict(self.buffer_inputs), dict(self.buffer_outputs),
                                             dict(self.initial_values)))

    def placeholder_of(self, fqn: str) -> str:
        return self._by_fqn[0][fqn]

    def output_of(self, fqn: str) -> int:
        return self._by_fqn[1][fqn]

    def initial_value(self, fqn: str) -> torch.Tensor:
        return self._by_fqn[2][fqn]


def row_major(t: torch.Tensor) -> torch.Tensor:
    """A buffer's value (or its fake) as an engine binding holds it: a row-major copy — `clone`
    keeps a transposed or expanded buffer's strides, which torch-tensorrt's inputs refuse
    ("Tensor does not have a supported memory format"). A fake already row-major is returned
    as it is: a fake is never written, and cloning one costs a fake-mode dispatch per buffer."""
    mode = getattr(t, "fake_mode", None)
    if mode is None:
        return t.detach().clone(memory_format=torch.contiguous_format)
    if t.is_contiguous():
        return t
    with mode:
        return t.clone(memory_format=torch.contiguous_format)


def planned(writes: Sequence[FoundWrite], plan: MutationPlan) -> dict[str, FoundWrite]:
    """The graph's writes by FQN, exactly the plan's buffers (a plan of another program, or a
    write the plan lacks, is an error naming the buffers)."""
    found = {w.fqn: w for w in writes}
    missing = [w.fqn for w in plan if w.fqn not in found]
    if missing:
        raise PlanError(f"the plan names buffers {missing} that this graph does not write; "
                        "plan and lift the same program")
    unplanned = [f for f in found if f not in plan]
    if unplanned:
        raise PlanError(f"buffers {unplanned} are written by the graph but missing from the plan; "
                        "a write is never dropped — re-run plan_mutations on this program")
    return found


def buffer_input_name(fqn: str) -> str:
    """The name of buffer `fqn`'s input in the lifted graph (an engine's binding name)."""
    return "b_" + fqn.replace(".", "_")


def reclaim_name(graph: torch.fx.Graph, name: str, live: set[str]) -> None:
    """Let a node be called `name` when no node of the graph is: fx never frees the name of an
    erased node (`ExportedProgram.module()` erases the buffer placeholders it unlifts, called
    `b_<fqn>` too), while a copy of the graph would not remember it — the lifted graph's input
    names (the engines' binding names) must not depend on whether it was copied."""
    used = getattr(getattr(graph, "_graph_namespace", None), "_used_names", None)
    if isinstance(used, set) and name not in live:
        used.discard(name)


def buffer_value(entry: BufferWrite, value: Node, cache_shape: Iterable[int]) -> Node:
    """The node that leaves the lifted graph as buffer `entry`'s new value: a KV-planned
    `index_put` rewritten to the converter form the plan judged (`index_put_kv`; its readers
    read the new node), a COPY_BACK cache write marked so torch-tensorrt's converters never
    alias it, anything else `value` itself."""
    if entry.kind is WriteKind.KV_ALIAS and value.target is INDEX_PUT:
        form = kv_form(value, tuple(cache_shape))
        if isinstance(form, str):
            raise PlanError(f"buffer write {value.name!r} is planned KV_ALIAS but has no KV form "
                            f"here ({form}); plan and lift the same program")
        value = rewrite(value, form)
    if entry.kind is WriteKind.COPY_BACK and value.target in (SLICE_SCATTER, INDEX_COPY):
        value.meta[NO_KV_ALIAS_MARKER] = True
    return value


def recompile_lazily(gm: GraphModule) -> None:
    """Regenerate `gm`'s Python code when it is next needed — its first call, `.code` or
    `str(gm)` — instead of now (torch.fx's `_LazyGraphModule` does the same for inductor; this
    keeps `gm`'s own class). An ordinary `gm.recompile()` before then (the next pass of a
    pipeline that rewrites the graph again) generates it and ends the laziness."""
    cls = type(gm)
    if cls.__qualname__.split(".")[-1] != "GraphModuleImpl":   # not gm's own (GraphModule.__new__)
        gm.recompile()
        return
    cls.forward = _forward_after_codegen
    cls.code = _CODE
    cls.__str__ = _str_after_codegen


def _codegen_if_pending(gm: GraphModule) -> None:
    if type(gm).forward is _forward_after_codegen:
        GraphModule.recompile(gm)   # sets the class's forward to the generated one


def _forward_after_codegen(self, *args, **kwargs):
    _codegen_if_pending(self)
    return type(self).forward(self, *args, **kwargs)


def _code_after_codegen(self) -> str:
    _codegen_if_pending(self)
    return self._code


def _str_after_codegen(self) -> str:
    _codegen_if_pending(self)
    return GraphModule.__str__(self)


_CODE = property(_code_after_codegen)


__all__ = ["LiftedGraph", "buffer_input_name", "buffer_value", "planned", "reclaim_name",
           "recompile_lazily"]
