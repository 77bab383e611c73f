"""What TensorRT-RTX's own builder holds while it builds a plan ahead of time on this CPU: figures
only, never a test gate.

A network of `--layers` matrix multiplications by constant weights (`--width` square, bf16 or
fp32), made with the SDK's Python API alone — no torch-tensorrt, no converter, nothing of this
project — built in a child process of its own each time: `build_serialized_network` (the plan
returned in memory, as torch-tensorrt 2.14.0 asks for it) and `build_serialized_network_to_stream`
into a file (the plan never held in memory by the caller). Prints, as multiples of the weights'
bytes, the peak RSS during the build above the RSS with the weights and the network made, and the
RSS left when the build returns: the floor any caller of this builder pays, whatever it does
around it. A third build asks for a weight-stripped plan (the only kind whose export would not
hold the weights twice); where the builder refuses it, that is printed.
`benchmarks/bench_scale.py --stages` gives the same split inside torch_tensorrt.compile.

Usage: python benchmarks/bench_rtx_builder.py [--width 4096] [--layers 8] [--dtype bfloat16]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(width: int, layers: int, dtype: str, how: str) -> dict:
    import numpy as np
    import tensorrt_rtx as trt
    import torch

    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    net = builder.create_network(0)
    tdt = {"bfloat16": trt.bfloat16, "float32": trt.float32}[dtype]
    x = net.add_input("x", tdt, (1, width))
    g = torch.Generator().manual_seed(0)
    held = []                      # the network refers to these bytes until the build ends
    for i in range(layers):
        w = (torch.randn(width, width, generator=g) * 0.01).to(getattr(torch, dtype))
        held.append(w)
        raw = w.view(torch.int16).numpy() if dtype == "bfloat16" else w.numpy()
        const = net.add_constant((width, width), trt.Weights(tdt, raw.ctypes.data, raw.size))
        const.name = f"w{i}"
        x = net.add_matrix_multiply(x.get_output(0) if i else x, trt.MatrixOperation.NONE,
                                    const.get_output(0), trt.MatrixOperation.NONE)
    net.mark_output(x.get_output(0))
    config = builder.create_builder_config()
    if how == "stripped":          # a weight-stripped plan, to be refitted with the same weights
        config.set_flag(trt.BuilderFlag.REFIT_IDENTICAL)
        config.set_flag(trt.BuilderFlag.STRIP_PLAN)
    weights = sum(w.numel() * w.element_size() for w in held)
    base, peak, stop = _rss(), [0], [False]

    def sample():
        while not stop[0]:
            peak[0] = max(peak[0], _rss())
            time.sleep(0.002)
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    start = time.perf_counter()
    if how in ("memory", "stripped"):
        plan = builder.build_serialized_network(net, config)
        if plan is None:
            stop[0] = True
            return {"how": how, "refused": "build_serialized_network returned None"}
        nbytes = plan.nbytes
    else:
        class ToFile(trt.IStreamWriter):
            def __init__(self, f):
                trt.IStreamWriter.__init__(self)
                self.f, self.n = f, 0

            def write(self, data):
                self.f.write(data)
                self.n += len(data)
                return len(data)
        with tempfile.TemporaryFile() as f:
            writer = ToFile(f)
            assert builder.build_serialized_network_to_stream(net, config, writer)
            nbytes = writer.n
    seconds = time.perf_counter() - start
    after = _rss()
    stop[0] = True
    t.join()
    del np
    return {"how": how, "weights": weights, "plan_bytes": nbytes, "seconds": seconds,
            "peak_x": (max(peak[0], after) - base) / weights, "after_x": (after - base) / weights}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.width, args.layers, args.dtype, args.child)))
        return
    print(f"TensorRT-RTX builder on this CPU: {args.layers} x [{args.width}, {args.width}] "
          f"{args.dtype} weights (the SDK's Python API alone)")
    for how in ("memory", "stream", "stripped"):
        out = subprocess.run([sys.executable, __file__, "--width", str(args.width), "--layers",
                              str(args.layers), "--dtype", args.dtype, "--child", how],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        label = {"memory": "build_serialized_network (plan in memory)",
                 "stream": "build_serialized_network_to_stream (plan to a file)",
                 "stripped": "weight-stripped (STRIP_PLAN + REFIT_IDENTICAL)"}[how]
        if "refused" in r:
            print(f"  {label:<52} refused by the builder: {r['refused']}")
            continue
        print(f"  {label:<52} weights {r['weights'] / 2**20:.0f} MiB, plan "
              f"{r['plan_bytes'] / 2**20:.0f} MiB, {r['seconds']:.1f} s | RSS above the network, "
              f"x the weights: peak {r['peak_x']:.2f}, after {r['after_x']:.2f}")


if __name__ == "__main__":
    main()
