"""Weights stored once: file, load and memory of one- and two-method programs, as multiples of
the weights' bytes. Figures only, never a test gate.

A stateful decoder stack (--layers blocks of four width x width projections and a KV cache),
saved with CPU reference engines through `tte.reference.export` (the patched
`torch_tensorrt.compile` + save) as
* `one`: one method (`forward`, one token);
* `two`: prefill (--prompt tokens) + decode (one token) sharing the cache;
* `two_ptd`: the same with the weights in an external `.ptd` (`save_data_externally`).
Each program is saved in a child process of its own (the model built there, seeded: the same
weights) and then loaded in another, and prints: file size (.pte + .ptd) / weights; the save's
peak RSS above the RSS with the model built, / weights (compile + lowering + write: the export's
peak; measured after a save of a tiny stack, so imports and one-time caches are not counted);
load time / the time to read the files (both best of 3, page cache warm); RSS grown by the load
and by the first call of each method, / weights. (TensorRT-RTX engines cannot run here; their
plans hold their weights: `bench_scale.py --kind tensorrt-rtx` measures their save.)

The save's peak is printed twice: with glibc's malloc as it comes, and (`held peak/w`) with its
mmap threshold fixed at 1 MiB (`MALLOC_MMAP_THRESHOLD_`, in the save's child only). glibc raises
the threshold to the largest block freed so far (up to 32 MiB), after which a freed weight-sized
block stays in the heap and in RSS: the first figure is what a user's process shows, the second
what the save holds (freed blocks given back), which is what the pipeline's copies decide.

Usage: python benchmarks/bench_weights.py [--width 2048] [--layers 4 8] [--prompt 8]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from bench_scale import _best_of, _peak, _reset_peak, _rss   # one timer and RSS reader


class Block(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(width, width, bias=False)
                                          for _ in range(4))

    def forward(self, x, cache, pos):
        k = self.k(x)
        cache.index_copy_(2, pos, k.view(1, 1, -1, k.shape[-1]))
        att = torch.softmax(self.q(x) @ cache[0, 0].T / 8.0, dim=-1)
        return x + self.o(att @ self.v(cache[0, 0]))


class Stack(torch.nn.Module):
    def __init__(self, width: int, layers: int, s_max: int = 32):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(layers))
        for i in range(layers):
            self.register_buffer(f"cache{i}", torch.zeros(1, 1, s_max, width))

    def forward(self, x, pos):
        for i, b in enumerate(self.blocks):
            x = b(x, getattr(self, f"cache{i}"), pos)
        return x


def _args(width: int, prompt: int):
    return {"forward": (torch.randn(1, 1, width), torch.tensor([0])),
            "prefill": (torch.randn(1, prompt, width), torch.arange(prompt)),
            "decode": (torch.randn(1, 1, width), torch.tensor([prompt]))}


def child(pte: str, ptd: str, width: int, prompt: int, weights: int) -> dict:
    """Load `pte` (with `ptd`) and call each method once: RSS and times, in this process."""
    import torch_tensorrt_ext as tte
    from torch_tensorrt_ext import runtime_lib
    runtime_lib.load()
    files = [pte] + ([ptd] if ptd else [])
    read = _best_of(3, lambda: [Path(f).read_bytes() for f in files])
    base = _rss()
    data = ptd or None
    methods = ["prefill", "decode"] if "two" in Path(pte).name else ["forward"]
    prog = tte.executorch.load(pte, methods[0], data_files=data)
    after_load = _rss() - base
    firsts = {}
    for m in methods:
        prog.run(list(_args(width, prompt)[m]), m)
        firsts[m] = (_rss() - base) / weights
    del prog
    load = _best_of(3, lambda: tte.executorch.load(pte, methods[0], data_files=data))
    return {"read_s": read, "load_s": load, "rss_load": after_load / weights, "rss_first": firsts}


def _save(name: str, d: Path, width: int, layers: int, prompt: int) -> dict:
    """Save program `name` (one | two | two_ptd) of `Stack(width, layers)` in `d`, in this
    process: the files and the save's peak RSS above the RSS with the model built (bytes)."""
    import contextlib
    import torch_tensorrt_ext as tte
    pte = d / f"{name}.pte"
    # the same save of a tiny stack first: the imports and one-time caches it loads are not the
    # save's peak (they do not grow with the weights)
    tiny = _args(64, prompt)
    tte.reference.export({"prefill": (Stack(64, 1).eval(), tiny["prefill"]),
                          "decode": (Stack(64, 1).eval(), tiny["decode"])}, str(pte))
    model = Stack(width, layers).eval()
    a = _args(width, prompt)
    stem = name if name.endswith("ptd") else None
    base = _rss()
    _reset_peak()
    with tte.executorch.save_data_externally(stem) if stem else contextlib.nullcontext():
        if name == "one":
            tte.reference.export(model, a["forward"], str(pte))
        else:
            tte.reference.export({"prefill": (model, a["prefill"]),
                                  "decode": (model, a["decode"])}, str(pte))
    return {"pte": str(pte), "ptd": str(d / f"{stem}.ptd") if stem else "",
            "save_peak": _peak() - base}


def _in_child(*argv: str, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True,
                         check=True, env=None if env is None else {**os.environ, **env})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--layers", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--save-child", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.save_child:
        name, d, width, layers, prompt = a.save_child
        print(json.dumps(_save(name, Path(d), int(width), int(layers), int(prompt))))
        return
    if a.child:
        pte, ptd, width, prompt, weights = a.child
        print(json.dumps(child(pte, ptd, int(width), int(prompt), int(weights))))
        return
    for layers in a.layers:
        model = Stack(a.width, layers).eval()
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        print(f"\n{layers} blocks, width {a.width}: weights {weights / 2**20:.1f} MiB")
        print(f"{'program':>14} {'file/w':>7} {'save peak/w':>11} {'held peak/w':>11} "
              f"{'load/read':>10} "
              f"{'RSS load/w':>11} {'RSS after each first call / w':>30}")
        with tempfile.TemporaryDirectory() as d:
            for name in ("one", "two", "two_ptd"):
                saved = _in_child("--save-child", name, d, str(a.width), str(layers),
                                  str(a.prompt))
                held = _in_child("--save-child", name, d, str(a.width), str(layers),
                                 str(a.prompt), env={"MALLOC_MMAP_THRESHOLD_": str(2**20)})
                pte, ptd = saved["pte"], saved["ptd"]
                size = Path(pte).stat().st_size + (Path(ptd).stat().st_size if ptd else 0)
                r = _in_child("--child", pte, ptd, str(a.width), str(a.prompt), str(weights))
                firsts = "  ".join(f"{m} {v:.3f}" for m, v in r["rss_first"].items())
                print(f"{name:>14} {size / weights:7.3f} {saved['save_peak'] / weights:11.3f} "
                      f"{held['save_peak'] / weights:11.3f} "
                      f"{r['load_s'] / r['read_s']:10.2f} "
                      f"{r['rss_load']:11.3f} {firsts:>30}   (load {r['load_s'] * 1e3:.1f} ms, "
                      f"read {r['read_s'] * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
