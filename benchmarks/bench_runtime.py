"""Figures for the C++ runtime with the reference engine (prints; gates nothing).

1. Per-call `execute` overhead of TensorRTBackend on a tiny program (y = x + x on 4 floats), timed
   in C++ through the backend interface (build/runtime/tte_bench_execute), and the same delegated
   program vs the bare payload through ExecuTorch's Python runtime.
2. Bytes the runtime copies per call, per buffer: a KV cache written through its aliased output
   vs the same cache declared copy-back, plus the small copy-back state (step counter, ring).

Run: .venv/bin/python benchmarks/bench_runtime.py   (after bash scripts/build_runtime.sh)
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "support")]

import runtime_helpers as H  # noqa: E402
from torch_tensorrt_ext import runtime_lib  # noqa: E402

BENCH = ROOT / "build" / "runtime" / "tte_bench_execute"


class Double(torch.nn.Module):
    def forward(self, x):
        return x + x


def double_spec() -> H.EngineSpec:
    return H.EngineSpec(module=Double(), inputs={"x": torch.zeros(4)}, outputs=["y"],
                        delegate_outputs=["y"])


def kv_spec(copy_back_cache: bool, heads=8, s_max=256, hidden=64) -> H.EngineSpec:
    spec = H.kv_step_spec(heads=heads, s_max=s_max, hidden=hidden)
    if copy_back_cache:
        spec.aliased = []
        spec.copy_back = [("cache_out", "cache"), ("step_out", "step")]
    return spec


def cpp_figures(blob: bytes, iters: int) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".blob") as f:
        f.write(blob)
        f.flush()
        out = subprocess.run([str(BENCH), f.name, str(iters)], check=True, capture_output=True,
                             text=True).stdout
    figures = {}
    for line in out.splitlines():
        m = re.match(r"(\w+)(?:\[(.*)\])?=(.*)", line)
        if m:
            figures[(m.group(1), m.group(2))] = float(m.group(3))
    return figures


def python_us_per_call(method, inputs, iters=3000) -> float:
    for _ in range(100):
        method.execute(inputs)
    t0 = time.perf_counter()
    for _ in range(iters):
        method.execute(inputs)
    return (time.perf_counter() - t0) / iters * 1e6


def main() -> None:
    if not BENCH.is_file():
        sys.exit(f"{BENCH} is missing: run `bash scripts/build_runtime.sh` first")
    print(f"runtime: {runtime_lib.version()}")
    print("\n== execute overhead, tiny program (y = x + x, 4 floats) ==")
    tiny = double_spec()
    f = cpp_figures(tiny.blob(["x"]), 200_000)
    print(f"C++ TensorRTBackend::execute (reference engine):  "
          f"{f[('execute_us_per_call', None)]:.3f} us/call")

    runtime_lib.load()
    from executorch.runtime import Runtime
    rt = Runtime.get()
    x = torch.zeros(4)
    # keep the Program objects alive: a Method points into the bytes its Program owns
    delegated_program = rt.load_program(H.delegated_pte(Double(), {"x": x}, tiny))
    bare_program = rt.load_program(H.payload_pte(Double(), [x]))
    delegated = delegated_program.load_method("forward")
    bare = bare_program.load_method("forward")
    d_us, b_us = python_us_per_call(delegated, [x]), python_us_per_call(bare, [x])
    print(f"Python Method.execute, delegated program:        {d_us:.2f} us/call")
    print(f"Python Method.execute, bare payload program:     {b_us:.2f} us/call")
    print(f"  delegate overhead seen from Python:            {d_us - b_us:+.2f} us/call")

    print("\n== bytes copied by the runtime per call ==")
    rows = [
        ("KV cache [1,8,256,64] f32 aliased (in place)", kv_spec(False),
         ["tok", "pos", "cache", "step"]),
        ("KV cache [1,8,256,64] f32 as copy-back", kv_spec(True), ["tok", "pos", "cache", "step"]),
        ("ring buffer [4,3] f32 copy-back", H.ring_spec(), ["x", "ring"]),
    ]
    print(f"{'case':<46} {'buffer':<24} {'bytes/call':>10} {'buffer bytes':>12} {'us/call':>8}")
    for title, spec, names in rows:
        f = cpp_figures(spec.blob(names), 2000)
        us = f[("execute_us_per_call", None)]
        for fqn_input, fqn in spec.buffers.items():
            nbytes = spec.inputs[fqn_input].nbytes
            copied = int(f.get(("buffer_bytes_per_call", fqn), 0))
            print(f"{title:<46} {fqn:<24} {copied:>10} {nbytes:>12} {us:>8.2f}")


if __name__ == "__main__":
    main()
