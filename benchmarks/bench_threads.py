"""Programs in several Python threads, and long load/run/reset runs (prints; gates nothing).

1. Threads: saves the demo decoder (KV caches, a conv ring buffer, a step counter) as a `.pte`
   with reference engines, then makes --calls `Program.run` calls in one thread, and the same
   total split across 2 and 4 threads, each thread with a program of its own
   (`tte.executorch.load`). Prints the wall time of each and its speed-up over one thread; with
   C cores the ideal speed-up of N threads is min(N, C). A call releases the GIL only in the
   native call (ctypes), so the Python around it is what can still serialize threads.
2. --cycles N: N load/run/reset cycles of that program in this process, printing VmRSS before
   and after (and at each tenth of the run), to show that a cycle leaks nothing.

Usage: python benchmarks/bench_threads.py [--calls 2000] [--threads 1 2 4] [--layers 4]
                                          [--head-dim 16] [--repeat 3] [--cycles 10000]
       [--intra-op N]: torch's intra-op threads (default: left as torch sets them)
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]

import torch  # noqa: E402

import torch_tensorrt_ext as tte  # noqa: E402
from torch_tensorrt_ext import reference, runtime_lib  # noqa: E402
from torch_tensorrt_ext.demo.models import Decoder  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def save(path: Path, layers: int, head_dim: int):
    torch.manual_seed(3)
    model = Decoder(layers=layers, head_dim=head_dim).eval()
    args = model.example_args()
    reference.export(copy.deepcopy(model), args, path)
    return args


def timed_threads(path: Path, args, calls: int, n: int) -> float:
    """Wall seconds for `calls` runs split over `n` threads (each its own program, loaded and
    warmed up before the clock starts)."""
    programs = [tte.executorch.load(path) for _ in range(n)]
    for p in programs:
        for _ in range(20):
            p.run(*args)
    start = threading.Barrier(n + 1)
    errors = []

    def work(p, k):
        start.wait()
        try:
            for _ in range(k):
                p.run(*args)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(p, calls // n)) for p in programs]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return wall


def bench_threads(path: Path, args, calls: int, counts, repeat: int) -> None:
    print(f"\n== {calls} calls in 1 thread vs split across threads (best of {repeat}) ==")
    print(f"cores: {os.cpu_count()}, torch intra-op threads: {torch.get_num_threads()}")
    base = None
    for n in counts:
        wall = min(timed_threads(path, args, calls, n) for _ in range(repeat))
        base = base or wall
        print(f"{n} thread(s): {wall:7.3f} s  {wall / calls * 1e6:7.1f} us/call  "
              f"speed-up x{base / wall:.2f}")


def bench_cycles(path: Path, args, cycles: int) -> None:
    print(f"\n== {cycles} load/run/reset cycles ==")
    for _ in range(50):  # warm-up: allocator pools, lazily built caches
        p = tte.executorch.load(path)
        p.run(*args)
        p.reset()
        del p
    before = rss_mib()
    print(f"VmRSS before: {before:.1f} MiB")
    t0 = time.perf_counter()
    for i in range(1, cycles + 1):
        p = tte.executorch.load(path)
        p.run(*args)
        p.run(*args)
        p.reset()
        del p
        if i % max(cycles // 10, 1) == 0:
            print(f"  after {i:6d} cycles: {rss_mib():.1f} MiB")
    after = rss_mib()
    print(f"VmRSS after:  {after:.1f} MiB  (growth {after - before:+.2f} MiB over {cycles} "
          f"cycles, {time.perf_counter() - t0:.1f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=0, help="load/run/reset cycles (0: none)")
    ap.add_argument("--intra-op", type=int, default=0, help="torch.set_num_threads (0: as is)")
    a = ap.parse_args()
    if a.intra_op:
        torch.set_num_threads(a.intra_op)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "decoder.pte"
        args = save(path, a.layers, a.head_dim)
        print(f"runtime: {runtime_lib.version()}; decoder: {a.layers} layers, "
              f"head_dim {a.head_dim}")
        if a.calls:
            bench_threads(path, args, a.calls, a.threads, a.repeat)
        if a.cycles:
            bench_cycles(path, args, a.cycles)


if __name__ == "__main__":
    main()
