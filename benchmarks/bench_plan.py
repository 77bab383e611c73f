"""Time plan_mutations + lift_mutated_buffers on synthetic decoders of 10, 100, 1000 layers.

Each layer has an index_copy KV cache, a ring buffer (cat) and a counter (add_). Prints time per
graph node and the 1000/100 ratio (target: linear, ratio <= 12). Beside ours, in the same run
and on the same decomposed GraphModule (what torch-tensorrt's compile hands its lifting pass),
upstream torch-tensorrt 2.14.0's `lift_mutated_buffers` when torch_tensorrt imports (its
`_buffer_lifting.py` is not touched by this project's series), with the ratio ours/upstream.
Not a test: figures only.
Usage: python benchmarks/bench_plan.py [--layers 10 100 1000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import time

import torch

import torch_tensorrt_ext as tte


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


def measure(n: int, repeat: int):
    args = (torch.ones(1, 2, 1, 4), torch.tensor([3]))
    t0 = time.perf_counter()
    ep = torch.export.export(Model(n), args).run_decompositions({})
    gm = ep.module()
    export_s = time.perf_counter() - t0
    nodes = len(gm.graph.nodes)
    best_plan = best_lift = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan = tte.plan_mutations(ep)
        t1 = time.perf_counter()
        tte.lift_mutated_buffers(gm, plan)
        t2 = time.perf_counter()
        best_plan, best_lift = min(best_plan, t1 - t0), min(best_lift, t2 - t1)
    assert len(plan) == 3 * n and len(plan.kv()) == n
    best_ours_gm = best_upstream = float("inf")
    upstream = _upstream_lift()
    for _ in range(repeat):
        fresh = ep.module()
        t0 = time.perf_counter()
        tte.lift_mutated_buffers(fresh, tte.plan_mutations(fresh))
        best_ours_gm = min(best_ours_gm, time.perf_counter() - t0)
        if upstream is not None:
            fresh = ep.module()
            t0 = time.perf_counter()
            upstream(fresh, None)
            best_upstream = min(best_upstream, time.perf_counter() - t0)
    return nodes, export_s, best_plan, best_lift, best_ours_gm, best_upstream


def _upstream_lift():
    try:
        from torch_tensorrt.dynamo.lowering._buffer_lifting import lift_mutated_buffers
    except Exception:  # noqa: BLE001 - not installed / not importable: no comparison
        return None
    return lift_mutated_buffers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print(f"{'layers':>7} {'nodes':>7} {'export s':>9} {'plan ms':>9} {'lift ms':>9} "
          f"{'us/node':>8} | on the GraphModule: {'ours ms':>8} {'upstream ms':>11} "
          f"{'ours/upstr':>10}")
    totals = {}
    for n in a.layers:
        nodes, ex, p, lift, ours, up = measure(n, a.repeat)
        totals[n] = p + lift
        ratio = f"{ours / up:>10.2f}" if up != float("inf") else f"{'n/a':>10}"
        upstr = f"{up * 1e3:>11.1f}" if up != float("inf") else f"{'n/a':>11}"
        print(f"{n:>7} {nodes:>7} {ex:>9.2f} {p * 1e3:>9.1f} {lift * 1e3:>9.1f} "
              f"{(p + lift) / nodes * 1e6:>8.1f} | {'':>19} {ours * 1e3:>8.1f} {upstr} {ratio}")
    if 100 in totals and 1000 in totals:
        print(f"time(1000 layers) / time(100 layers) = {totals[1000] / totals[100]:.2f} "
              "(target <= 12)")


if __name__ == "__main__":
    main()
