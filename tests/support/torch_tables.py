"""torch's table of composite-implicit (CIA) operators, kept while the operator registry is
unchanged.

torch recomputes that table on every `run_decompositions` — walking every op namespace (~0.1 s on a
free core, ~0.3 s loaded), 6-8 times per compiled and saved program — although it depends only on
the registered operators. `memoize_cia_table()` replaces torch's function, for this process, with
one that keeps the table per registry — keyed by the op namespaces, every registered op name and
every composite-implicit registration — and recomputes it every `CHECK_EVERY` lookups, raising if
the kept one differs: the process computes what torch computes, faster.

Invariant: the memo returns the table torch computed for the registry key of that moment; a change
to the table the key does not see (a composite-implicit kernel registered from Python on an
existing op, say) is found by the next periodic recomputation, which raises `StaleTable` rather
than let a stale table decide a decomposition silently.
"""
from __future__ import annotations

import torch

CHECK_EVERY = 64


class StaleTable(RuntimeError):
    """The kept table differs from torch's under an unchanged registry key."""


def memoize_cia_table() -> None:
    from torch._export import utils
    from torch.export import decomp_utils, exported_program
    fresh = utils._collect_all_valid_cia_ops
    if getattr(fresh, "memoized", False):
        return
    memo: dict = {}
    lookups = [0]

    def key() -> tuple:
        return (tuple(torch.ops._dir), len(torch._C._dispatch_get_all_op_names()),
                len(torch._C._dispatch_get_registrations_for_dispatch_key(
                    "CompositeImplicitAutograd")))

    def collect() -> set:
        k = key()
        if k not in memo:
            memo.clear()
            memo[k] = frozenset(fresh())
        lookups[0] += 1
        if lookups[0] % CHECK_EVERY == 0 and frozenset(fresh()) != memo[k]:
            raise StaleTable("torch's composite-implicit op table changed under an unchanged "
                             "registry key")
        return set(memo[k])

    collect.memoized = True
    for module in (utils, decomp_utils, exported_program):
        if getattr(module, "_collect_all_valid_cia_ops", None) is fresh:
            module._collect_all_valid_cia_ops = collect


__all__ = ["CHECK_EVERY", "StaleTable", "memoize_cia_table"]
