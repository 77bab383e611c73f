"""Loading a large `.pte` against reading it: figures only, never a test gate.

Saves a stateful model whose weights make a reference engine of about --mb megabytes (CPU
reference engines, through `torch_tensorrt.save`), then times, best of --repeat each:
* reading the file (`Path.read_bytes`, page cache warm after the first pass);
* hashing the engine payload with OpenSSL's SHA-256 (`hashlib`, what the runtime now links);
* `tte.executorch.load` (the runtime: parse, the TR03 digests, the reference engine's init; the
  Python side reads the header and the program flatbuffer only).
Prints MB/s and load time / read time.

Usage: python benchmarks/bench_load.py [--mb 256] [--repeat 3]
"""
from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

import torch


class Wide(torch.nn.Module):
    def __init__(self, width: int, layers: int):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))
        self.register_buffer("state", torch.zeros(1, width))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        new = self.state * 0.5 + x
        self.state.copy_(new)
        return new


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import torch_tensorrt_ext as tte
    width = 2048
    layers = max(1, args.mb * 2**20 // (width * width * 4))
    model = Wide(width, layers).eval()
    x = torch.randn(1, width)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "wide.pte"
        tte.reference.export(model, (x,), str(path))
        size = path.stat().st_size
        data = path.read_bytes()
        read = _best(path.read_bytes, args.repeat)
        digest = _best(lambda: hashlib.sha256(data).digest(), args.repeat)
        load = _best(lambda: tte.executorch.load(str(path)), args.repeat)
    mb = size / 2**20
    print(f".pte {mb:.0f} MiB ({layers} x Linear({width}, {width}) in one reference engine)")
    print(f"  read the file            {read * 1e3:8.1f} ms  {mb / read:8.0f} MiB/s")
    print(f"  SHA-256 (OpenSSL)        {digest * 1e3:8.1f} ms  {mb / digest:8.0f} MiB/s")
    print(f"  tte.executorch.load      {load * 1e3:8.1f} ms  {mb / load:8.0f} MiB/s  "
          f"= {load / read:.1f} x reading it")


if __name__ == "__main__":
    main()
