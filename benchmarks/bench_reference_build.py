"""What the reference engine's fast lowering pays: a partition taken as a program
without retracing (`engines.lifted_program`) and lowered once per distinct operator call
(`engines.edge_replay`), beside ExecuTorch's whole pipeline (`torch.export` + `to_edge`) on the
same partition — figures only, never a test gate.

For the demo decoder at --layers (one partition: every layer's attention, conv state and
counter), times `payload.to_executorch_program` best of --repeat both ways in the same process,
alternating, and prints seconds, the ratio and the distinct/total operator calls. Both ways make
the same kernel calls (tests/engines/test_edge_replay.py proves it for every e2e model).

Usage: python benchmarks/bench_reference_build.py [--layers 8 32] [--repeat 3]
"""
from __future__ import annotations

import argparse
import copy
import gc
import time
import warnings


def _partition(layers: int):
    """The partition GraphModule the reference compiler lowers for the demo decoder."""
    from torch_tensorrt_ext import reference
    from torch_tensorrt_ext.demo.models import Decoder
    from torch_tensorrt_ext.seams import engine_kind as seam
    seen, real = [], seam.to_executorch_program

    def record(gm, *rest):
        seen.append(copy.deepcopy(gm))
        return real(gm, *rest)
    seam.to_executorch_program = record
    try:
        model = Decoder(layers=layers).eval()
        reference.compile(model, model.example_args(0))
    finally:
        seam.to_executorch_program = real
    return max(seen, key=lambda g: len(g.graph.nodes))


def _time(fn, gm) -> float:
    gc.collect()
    start = time.perf_counter()
    fn(copy.deepcopy(gm))
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    from torch_tensorrt_ext.engines import edge_replay, payload
    from torch_tensorrt_ext.engines.lifted_program import lifted_program

    def whole(gm):
        real = payload.lifted_program
        payload.lifted_program = lambda _gm: None      # the fast path declines: whole pipeline
        try:
            return payload.to_executorch_program(gm)
        finally:
            payload.lifted_program = real

    for layers in args.layers:
        gm = _partition(layers)
        lifted = lifted_program(copy.deepcopy(gm))
        calls = edge_replay.distinct_calls(lifted) if lifted is not None else None
        fast, slow = [], []
        ways = ((payload.to_executorch_program, fast), (whole, slow))
        for r in range(args.repeat):
            for fn, out in (ways if r % 2 == 0 else ways[::-1]):   # alternate which goes first
                out.append(_time(fn, gm))
        n_ops = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        print(f"demo decoder, {layers} layers ({n_ops} operator calls"
              f"{f', {calls} distinct' if calls is not None else ''}): "
              f"lifted+replayed {min(fast):.2f} s, export+to_edge {min(slow):.2f} s, "
              f"ratio {min(slow) / min(fast):.1f}x")


if __name__ == "__main__":
    main()
