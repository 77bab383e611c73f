"""The young generation's collection threshold of Python's cyclic garbage collector, raised for
the test and generator processes.

A compile + save allocates objects by the million (fx nodes, fake tensors, sympy expressions, the
~10^4 kernels each `run_decompositions` registers and takes back), and CPython's default starts a
young collection every 700 net allocations and a full one every 100 of those (subject to its
"a quarter of the long-lived heap is new" rule): in a process holding a few hundred MiB of graphs a
quarter of the time went to the collector. Measured with `gc.callbacks` over 12 drawn programs of
several methods checked on every save path (`method_check.check_methods`, one core, nothing else
running): 3.30-3.58 s a program with Python's (700, 10, 10), ~10 s of the 40 in the collector;
2.40-2.51 s with (10000, 10, 10), ~2.8 s in it; the same peak RSS (960 vs 965 MiB). A larger young
threshold (20000, 100000) or `gc.freeze()` after the imports gained nothing more.

Only the young threshold changes: the older generations keep Python's thresholds, so full
collections still run by the same rule and cyclic garbage (a graph holding tensors) is freed as
before, only found in larger batches. Nothing the tests compare depends on when a cycle is freed.

Invariant: `raise_young_threshold()` changes `gc.get_threshold()[0]` alone, to `YOUNG` or to
$TTE_GC_YOUNG when set (`TTE_GC_YOUNG=700` is Python's own).
"""
from __future__ import annotations

import gc
import os

YOUNG = 10_000


def raise_young_threshold() -> int:
    """Set the young generation's threshold (the process's; the others kept); returns it."""
    young = int(os.environ.get("TTE_GC_YOUNG", YOUNG))
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)
    return young


__all__ = ["YOUNG", "raise_young_threshold"]
