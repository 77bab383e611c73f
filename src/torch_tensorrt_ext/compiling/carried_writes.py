"""Compile's structural check: every buffer the exported program writes is carried by the module.

Invariant: `check_carried(gm, plan, writers)` returns only when every buffer in `writers` (what
the exported program handed to `torch_tensorrt.compile` writes, FQN -> the node writing it) has
an entry in the module's plan, and the module really performs that write each call:

* KV_ALIAS — an engine of the module aliases the buffer's input binding (written in place);
* COPY_BACK by the engine (`Copier.ENGINE`) — that engine is called with the buffer;
* COPY_BACK by the program — the module's graph ends with an `aten.copy_` into the buffer.

Anything else raises `PlanError` naming the buffer and the node that writes it, so a write lost
anywhere between export and the module (a pass deleting it, a partition dropping it) fails the
compile instead of producing a module that runs with stale state.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch.fx import GraphModule

from ..contracts.plan import Copier, MutationPlan, PlanError


def _copied_into(gm: GraphModule) -> set:
    return {str(n.args[0].target) for n in gm.graph.nodes
            if n.op == "call_function" and n.target is torch.ops.aten.copy_.default
            and getattr(n.args[0], "op", None) == "get_attr"}


def _taken_by_engine(gm: GraphModule) -> dict[str, set]:
    """Engine call target -> the buffers (FQNs) it is handed, read in one pass."""
    taken: dict[str, set] = {}
    for n in gm.graph.nodes:
        if n.op == "call_module":
            taken.setdefault(str(n.target), set()).update(
                str(a.target) for a in n.args if getattr(a, "op", None) == "get_attr")
    return taken


def check_carried(gm: GraphModule, plan: MutationPlan, writers: Mapping[str, str]) -> None:
    """Refuse a compiled module that does not perform every write of the exported program."""
    copied, taken = _copied_into(gm), _taken_by_engine(gm)
    for fqn, node in writers.items():
        where = f"buffer {fqn!r} is written by the exported program (node {node!r})"
        if fqn not in plan:
            raise PlanError(f"{where}, but the compiled module does not carry the write: no "
                            f"entry in its plan (planned: {list(plan.fqns)}). The module would "
                            "run with stale state; please report this with the program")
        w = plan[fqn]
        if w.copier is Copier.PROGRAM:
            ok, how = fqn in copied, "no aten.copy_ into the buffer in the module's graph"
        else:
            ok = fqn in taken.get(w.engine, ())
            how = f"engine {w.engine!r} does not take the buffer"
        if not ok:
            raise PlanError(f"{where} and planned {w.kind.name} (copier {w.copier.name}), but "
                            f"{how}; the module would run with stale state")


__all__ = ["check_carried"]
