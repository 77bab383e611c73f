"""Plan + lift + reconcile beside upstream torch-tensorrt 2.14.0's `lift_mutated_buffers`, on
synthetic decoders (default 10, 120 and 800 layers: about 170, 2,000 and 13,600 graph nodes).

Each layer has an index_copy KV cache, a ring buffer (cat) and a counter (add_). Upstream is
timed in the same run when torch_tensorrt imports (its `_buffer_lifting.py` is not touched by
this project's series). All programs are exported first; then each round times every size,
ours and upstream's in turn (the order reversed every other round), so all figures see the
same load and process state. Every figure is the best of `--repeat` wall-clock runs, each
started after a garbage collection. Two paths:

* on the decomposed GraphModule (`ExportedProgram.run_decompositions({}).module()`, what
  torch-tensorrt's compile hands its lifting pass; a fresh one per run, untimed): ours is the
  compile seam — `StatefulCompile(gm)` (plan, lift in place, read-after-write and copy-back
  marks, the record a rebuild would start from) plus `reconcile` against one engine that
  converted the whole graph — against upstream's `lift_mutated_buffers(gm)`. The public API
  (`plan_mutations` + `lift_mutated_buffers(in_place=True)` + `reconcile`) is printed too, and
  "+codegen": ours with the lifted module's Python code generated (its first call does that;
  the lift leaves it to the pipeline's next pass, which regenerates it anyway — upstream's
  lift generates it twice);
* the whole path from the ExportedProgram torch.export returns (training IR): ours is
  `plan_mutations(ep)` + `lift_mutated_buffers(ep, plan)` + `reconcile` (one functionalization,
  shared — the cache of it is cleared before each run so every run pays for it — and the lift
  the compiler runs, on the functional program's `module(check_guards=False)`) against
  upstream's `ep.run_decompositions({})` + `.module()` + `lift_mutated_buffers`.

Then the targets the lift is held to (against upstream, and per-node growth), each with its
measured ratio and met / NOT met.
Not a test: figures only.
Usage: python benchmarks/bench_plan.py [--layers 10 120 800] [--repeat 7] [--whole-repeat 5]
"""
from __future__ import annotations

import argparse
import gc
import inspect
import time
from collections.abc import Callable

import torch

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.lowering import graph_writes
from torch_tensorrt_ext.compiling.stateful_compile import StatefulCompile


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(1, 2, 16, 4))
        self.register_buffer("ring", torch.zeros(1, 4, 3))
        self.register_buffer("count", torch.zeros(1, dtype=torch.int64))

    def forward(self, x, pos):
        self.k_cache.index_copy_(2, pos, x)
        self.ring.copy_(torch.cat([self.ring[:, :, 1:], x[:, 0, 0, :].unsqueeze(-1)], dim=2))
        self.count.add_(1)
        return x + self.k_cache[:, :, :1, :] + self.ring.sum()


class Model(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer() for _ in range(n))

    def forward(self, x, pos):
        for layer in self.layers:
            x = layer(x, pos)
        return x


ARGS = (torch.ones(1, 2, 1, 4), torch.tensor([3]))
INF = float("inf")


def one_engine(lifted: tte.LiftedGraph, plan: tte.MutationPlan) -> tte.EngineInfo:
    """What an engine that converted the whole lifted graph reports: every input and output a
    binding, each KV write aliased to its buffer's input."""
    n_out = lifted.num_user_outputs + len(lifted.buffer_outputs)
    outs = tuple(f"output{i}" for i in range(n_out))
    ins = lifted.user_inputs + tuple(p for _, p in lifted.buffer_inputs)
    return tte.EngineInfo(
        name="_run_on_acc_0", input_names=ins, output_names=outs,
        aliased_io=tuple(tte.AliasedIO(outs[lifted.output_of(w.fqn)],
                                       lifted.placeholder_of(w.fqn)) for w in plan.kv()),
        input_buffers=tuple((p, f) for f, p in lifted.buffer_inputs),
        output_buffers=tuple((outs[i], f) for f, i in lifted.buffer_outputs))


def seam(gm) -> tte.MutationPlan:
    sc = StatefulCompile(gm)
    return tte.reconcile(sc.plan, [one_engine(sc.lifted, sc.plan)])


# the package before `in_place` (lifting a copy) runs this benchmark too, for before/after figures
IN_PLACE = ({"in_place": True} if "in_place" in
            inspect.signature(tte.lift_mutated_buffers).parameters else {})


def public(gm, codegen: bool = False) -> tte.MutationPlan:
    plan = tte.plan_mutations(gm)
    lifted = tte.lift_mutated_buffers(gm, plan, **IN_PLACE)
    if codegen:
        lifted.gm.recompile()   # generates the Python code, as its first call would
    return tte.reconcile(plan, [one_engine(lifted, plan)])


def whole_ours(ep) -> tte.MutationPlan:
    plan = tte.plan_mutations(ep)
    lifted = tte.lift_mutated_buffers(ep, plan)
    return tte.reconcile(plan, [one_engine(lifted, plan)])


def _upstream_lift() -> Callable | None:
    try:
        from torch_tensorrt.dynamo.lowering._buffer_lifting import lift_mutated_buffers
    except Exception:  # noqa: BLE001 - not installed / not importable: no comparison
        return None
    return lift_mutated_buffers


def _timed(fn, arg) -> float:
    gc.collect()   # the previous run's garbage is not collected inside this one's timing
    t0 = time.perf_counter()
    fn(arg)
    return time.perf_counter() - t0


def programs(layers) -> dict[int, dict[str, object]]:
    """The training-IR and decomposed programs of each size, exported before anything is timed."""
    out = {}
    for n in layers:
        t0 = time.perf_counter()
        ep_train = torch.export.export(Model(n), ARGS)
        ep = ep_train.run_decompositions({})
        out[n] = {"train": ep_train, "decomposed": ep, "export": time.perf_counter() - t0,
                  "nodes": len(ep.module().graph.nodes)}
        plan = seam(ep.module())
        assert len(plan) == 3 * n and len(plan.kv()) == n
    return out


def _in_turn(runs: dict[str, Callable], r: int):
    """The runs of round `r`, in an order that is reversed every other round: what runs right
    after another run pays for it (measured here: up to ~5% of the whole path), so neither side
    always does."""
    items = list(runs.items())
    return items if r % 2 == 0 else items[::-1]


def measure(progs, repeat: int, whole_repeat: int, upstream) -> dict[int, dict[str, float]]:
    """Best times per size. Rounds interleave every size and both implementations, so all see
    the same machine load and the same process (heap) state."""
    keys = ("seam", "public", "codegen", "upstream", "whole", "whole_up")
    best = {n: dict.fromkeys(keys, INF) for n in progs}
    runs = {"seam": seam, "public": public, "codegen": lambda g: public(g, codegen=True)}
    if upstream is not None:
        runs["upstream"] = lambda g: upstream(g, None)
    for r in range(repeat):
        for n, p in progs.items():
            for key, fn in _in_turn(runs, r):
                best[n][key] = min(best[n][key], _timed(fn, p["decomposed"].module()))
    whole = {"whole": whole_ours}
    if upstream is not None:
        whole["whole_up"] = lambda e: upstream(e.run_decompositions({}).module(), None)
    for r in range(whole_repeat):
        for n, p in progs.items():
            for key, fn in _in_turn(whole, r):
                # each run functionalizes, as for a new program
                getattr(graph_writes, "_FUNCTIONAL", {}).clear()
                best[n][key] = min(best[n][key], _timed(fn, p["train"]))
    return {n: {"export": p["export"], "nodes": p["nodes"], **best[n]}
            for n, p in progs.items()}


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f}" if s != INF else "n/a"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b not in (0, INF) and a != INF else "n/a"


def _verdict(ratio: float | None, limit: float) -> str:
    if ratio is None:
        return "not measured (upstream torch_tensorrt does not import)"
    return f"{ratio:.2f} (target <= {limit}) -> {'met' if ratio <= limit else 'NOT met'}"


def report(rows: dict[int, dict[str, float]]) -> None:
    print(f"{'layers':>6} {'nodes':>6} {'export s':>8} | decomposed GraphModule, ms: "
          f"{'ours':>7} {'us/node':>7} {'public':>7} {'+codegen':>8} {'upstream':>9} "
          f"{'ours/up':>7} | from the ExportedProgram, ms: {'ours':>8} {'upstream':>9} "
          f"{'ours/up':>7}")
    for n, r in rows.items():
        print(f"{n:>6} {int(r['nodes']):>6} {r['export']:>8.2f} | {'':>27}"
              f"{_ms(r['seam']):>7} {r['seam'] / r['nodes'] * 1e6:>7.2f} {_ms(r['public']):>7} "
              f"{_ms(r['codegen']):>8} {_ms(r['upstream']):>9} "
              f"{_ratio(r['seam'], r['upstream']):>7} | {'':>29}{_ms(r['whole']):>8} "
              f"{_ms(r['whole_up']):>9} {_ratio(r['whole'], r['whole_up']):>7}")
    targets(rows)


def _closest(rows, nodes: int) -> int:
    return min(rows, key=lambda n: abs(rows[n]["nodes"] - nodes))


def targets(rows: dict[int, dict[str, float]]) -> None:
    small, large = _closest(rows, 2000), _closest(rows, 13000)
    up = all(r["upstream"] != INF for r in rows.values())
    print("targets:")
    for label, n in (("~2k", small), ("~13k", large)):
        r = rows[n]
        ratio = r["seam"] / r["upstream"] if up else None
        print(f"  1. ours (plan + lift + reconcile) / upstream lift_mutated_buffers at {label} "
              f"nodes ({int(r['nodes'])}): {_verdict(ratio, 0.5)}")
    worst = max(rows, key=lambda n: rows[n]["whole"] / rows[n]["whole_up"]) if up else small
    ratio = rows[worst]["whole"] / rows[worst]["whole_up"] if up else None
    sizes = ", ".join(f"{int(r['nodes'])}: {_ratio(r['whole'], r['whole_up'])}"
                      for r in rows.values())
    print(f"  2. whole path from an ExportedProgram / upstream (decompose + lift), worst of "
          f"[{sizes}]: {_verdict(ratio, 1.0)}")
    per_node = (rows[large]["seam"] / rows[large]["nodes"]) / \
        (rows[small]["seam"] / rows[small]["nodes"])
    print(f"  3. per-node cost of ours at {int(rows[large]['nodes'])} / at "
          f"{int(rows[small]['nodes'])} nodes: {_verdict(per_node, 1.15)}")
    if up:
        up_growth = (rows[large]["upstream"] / rows[large]["nodes"]) / \
            (rows[small]["upstream"] / rows[small]["nodes"])
        print(f"     (upstream's lift, the same: {up_growth:.2f})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, nargs="+", default=[10, 120, 800])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--whole-repeat", type=int, default=5)
    a = ap.parse_args()
    upstream = _upstream_lift()
    report(measure(programs(a.layers), a.repeat, a.whole_repeat, upstream))


if __name__ == "__main__":
    main()
