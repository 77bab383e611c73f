"""Real model sizes through compile + save + load: figures only, never a test gate.

A transformers Llama or Qwen3 (random init, nothing downloaded) exported as transformers
documents for ExecuTorch (`TorchExportableModuleForDecoderOnlyLM`, static cache), then, per engine
kind, in a child process of its own (so its peak resident memory is its own):
`torch_tensorrt.compile` → `torch_tensorrt.save(output_format="executorch")` → (reference engines
only: TensorRT-RTX engines cannot run here) `tte.executorch.load`. Prints per stage: time, peak
RSS above the RSS with the model built and exported (as a multiple of the weights' bytes; the
peak is reset after the export, so the export's own peak is not counted), the `.pte` size, load
time / time to read the file.

With `--stages`, RSS is also sampled every 2 ms and attributed to the stages of the save (each
wrapped by name, in the child only): RSS above the model when the stage starts, its peak and when
it ends, as multiples of the weights — where the copies of the weights live.

`--kind stock` runs stock torch-tensorrt 2.14.0 (plus its ahead-of-time patch, without which it
cannot import here) beside ours, through the same calls; where it fails, the failure is printed.

Usage: python benchmarks/bench_scale.py [--size 150m|600m|qwen3-0.6b|llama-1b]
                                         [--dtype float32|bfloat16]
                                         [--kind reference|tensorrt-rtx|stock ...] [--stages]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import importlib
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# name -> (transformers config class, its arguments): two Llamas of about 150M and 600M
# parameters, and two shapes of released models (random init, nothing downloaded): Qwen3-0.6B
# and Llama-3.2-1B
SIZES = {
    "150m": ("LlamaConfig", dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                 num_attention_heads=16, num_key_value_heads=4, head_dim=64,
                                 vocab_size=32000)),
    "600m": ("LlamaConfig", dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=12,
                                 num_attention_heads=16, num_key_value_heads=4, head_dim=64,
                                 vocab_size=32000)),
    "qwen3-0.6b": ("Qwen3Config", dict(hidden_size=1024, intermediate_size=3072,
                                       num_hidden_layers=28, num_attention_heads=16,
                                       num_key_value_heads=8, head_dim=128, vocab_size=151936,
                                       tie_word_embeddings=True)),
    "llama-1b": ("LlamaConfig", dict(hidden_size=2048, intermediate_size=8192,
                                     num_hidden_layers=16, num_attention_heads=32,
                                     num_key_value_heads=8, head_dim=64, vocab_size=128256,
                                     tie_word_embeddings=True)),
}


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak() -> int:
    """Peak RSS since the last `_reset_peak()` (VmHWM; the process's lifetime peak if the kernel
    cannot reset it)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _first_line(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"


def _stock_overlay(dst: Path) -> str:
    """A site directory whose torch_tensorrt is stock 2.14.0 plus the series' first patch only
    (engines built ahead of time without a GPU: stock cannot even import here) — the upstream
    peer suite's baseline (scripts/upstream_peer.py)."""
    import sysconfig
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from upstream_peer import _overlay
    return str(_overlay(Path(sysconfig.get_paths()["purelib"]), dst / "pristine"))


def _best_of(n: int, fn) -> float:
    """The fastest of `n` timed calls (seconds): both sides of a ratio measured alike."""
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _reset_peak() -> None:
    """Forget the peak so far (the model's export), so `_peak()` measures compile + save."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


# the save's stages, outermost first: (module, attribute path, label)
STAGES = [
    ("torch_tensorrt", "save", "save (all)"),
    ("torch_tensorrt_ext.seams.executorch_hooks", "prepare_programs", "prepare (host values)"),
    ("executorch.exir.program._program", "_gen_edge_manager_for_partitioners", "to edge dialect"),
    ("executorch.exir.program._program", "EdgeProgramManager.to_backend", "partition + preprocess"),
    ("torch_tensorrt_ext.seams.executorch_hooks", "preprocess", "  preprocess (blob)"),
    ("executorch.exir.program._program", "EdgeProgramManager.to_executorch", "to_executorch"),
    ("executorch.exir.program._program", "ExecutorchProgramManager.write_to_file", "write file"),
    ("executorch.exir.program._program", "serialize_for_executorch", "  serialize"),
]


# the compile's stages (TensorRT kinds: the converters build the network, then the builder)
COMPILE_STAGES = [
    ("torch_tensorrt.dynamo.conversion._TRTInterpreter", "TRTInterpreter.run",
     "interpret (network + build)"),
    ("torch_tensorrt.dynamo.conversion._TRTInterpreter",
     "TRTInterpreter._construct_trt_network_def", "  network (converters)"),
]


class StageTrace:
    """RSS sampled every 2 ms by a thread; each wrapped stage records RSS at entry, its peak and
    RSS at exit (summed over calls: entry/exit of the first/last call, the peak of all)."""

    def __init__(self, base: int):
        self.base, self.open, self.rows, self.lock = base, {}, {}, threading.Lock()
        self.stop = False
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self):
        while not self.stop:
            rss = _rss()
            with self.lock:
                for label in self.open:
                    self.rows[label]["peak"] = max(self.rows[label]["peak"], rss)
            time.sleep(0.002)

    def wrap(self, module: str, path: str, label: str):
        owner = importlib.import_module(module)
        *outer, attr = path.split(".")
        for name in outer:
            owner = getattr(owner, name)
        fn = getattr(owner, attr)

        def traced(*a, **k):
            rss = _rss()
            with self.lock:
                row = self.rows.setdefault(label, {"enter": rss, "peak": rss, "calls": 0})
                row["calls"] += 1
                self.open[label] = self.open.get(label, 0) + 1
            try:
                return fn(*a, **k)
            finally:
                rss = _rss()
                with self.lock:
                    row["peak"], row["exit"] = max(row["peak"], rss), rss
                    self.open[label] -= 1
                    if not self.open[label]:
                        del self.open[label]
        setattr(owner, attr, traced)

    def report(self, weights: int) -> list:
        x = lambda v: round((v - self.base) / weights, 2)  # noqa: E731
        return [(label, r["calls"], x(r["enter"]), x(r["peak"]), x(r["exit"]))
                for label, r in self.rows.items()]


def child(size: str, dtype: str, kind: str, stages: bool = False) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    import torch_tensorrt_ext as tte
    from torch_tensorrt_ext.upstream_api import torch_tensorrt_module
    torch_tensorrt = torch_tensorrt_module()
    torch.manual_seed(0)
    config_class, kwargs = SIZES[size]
    cfg = getattr(transformers, config_class)(max_position_embeddings=256, **kwargs)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(getattr(torch, dtype)).eval()
    model.generation_config.cache_implementation = "static"
    weights = sum(p.numel() * p.element_size() for p in model.parameters())  # tied: counted once
    ids, pos = torch.tensor([[1]]), torch.tensor([0])
    ep = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=64).export(
        input_ids=ids, cache_position=pos)
    base = _rss()
    _reset_peak()
    out = {"size": size, "dtype": dtype, "kind": kind, "weights": weights,
           "params": sum(p.numel() for p in model.parameters())}
    def ctx():
        return tte.reference.engines() if kind == "reference" else contextlib.nullcontext()
    compile_trace = StageTrace(base) if stages and kind != "reference" else None
    for module, path, label in (COMPILE_STAGES if compile_trace else []):
        compile_trace.wrap(module, path, label)
    t = time.perf_counter()
    try:
        with ctx():
            # stock 2.14.0 (+ its AOT patch only) asks CUDA for free memory in compile unless
            # the module is offloaded to the host: its documented way around that query
            extra = {"offload_module_to_cpu": True} if kind == "stock" else {}
            trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=[ids, pos],
                                         min_block_size=1, **extra)
    except Exception as e:  # noqa: BLE001  (stock 2.14.0: reported, not raised)
        out["compile_error"] = _first_line(e)
        return out
    out["compile_s"] = time.perf_counter() - t
    out["compile_peak_x"] = (_peak() - base) / weights
    if compile_trace:
        compile_trace.stop = True
        out["compile_stages"] = compile_trace.report(weights)
    trace = StageTrace(base) if stages else None   # the save's stages only (compile lowers too)
    for module, path, label in (STAGES if stages else []):
        trace.wrap(module, path, label)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.pte"
        t = time.perf_counter()
        try:
            with ctx():
                torch_tensorrt.save(trt, str(path), output_format="executorch",
                                    arg_inputs=[ids, pos])
        except Exception as e:  # noqa: BLE001  (stock 2.14.0: reported, not raised)
            out["save_error"] = _first_line(e)
            return out
        out["save_s"] = time.perf_counter() - t
        out["peak_x"] = (_peak() - base) / weights
        if trace:
            out["stages"] = trace.report(weights)
        out["pte_bytes"] = path.stat().st_size
        out["read_s"] = _best_of(3, path.read_bytes)   # from the page cache, as the load reads
        if kind == "reference":
            del trt, ep
            out["load_s"] = _best_of(3, lambda: tte.executorch.load(str(path)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="150m", choices=sorted(SIZES))
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--kind", nargs="+", default=["reference", "tensorrt-rtx", "stock"])
    ap.add_argument("--stages", action="store_true", help="RSS by stage of the save")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        size, dtype, kind, stages = args.child
        print(json.dumps(child(size, dtype, kind, stages == "1")))
        return
    print(f"transformers {SIZES[args.size][0].removesuffix('Config')} {args.size} {args.dtype}: "
          f"compile + save + load, per engine kind")
    scratch = tempfile.TemporaryDirectory(prefix="tte-bench-")
    for kind in args.kind:
        env = dict(os.environ)
        if kind == "stock":   # TensorRT-RTX engines through stock 2.14.0 (+ its AOT patch)
            env["PYTHONPATH"] = _stock_overlay(Path(scratch.name))
        done = subprocess.run([sys.executable, __file__, "--child", args.size, args.dtype, kind,
                               "1" if args.stages else "0"],
                              capture_output=True, text=True, env=env)
        if done.returncode != 0:
            print(f"  {kind}: failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        mib = r["weights"] / 2**20
        if "compile_error" in r or "save_error" in r:
            got = (f"compile fails: {r['compile_error']}" if "compile_error" in r else
                   f"compile {r['compile_s']:.1f} s (peak {r['compile_peak_x']:.2f}x) | save "
                   f"fails: {r['save_error']}")
            print(f"  {kind:<13} {r['params'] / 1e6:.0f} M params, {mib:.0f} MiB weights | {got}")
            continue
        load = (f"load {r['load_s']:.2f} s = {r['load_s'] / r['read_s']:.2f} x reading it"
                if "load_s" in r else "load: cannot run here")
        print(f"  {kind:<13} {r['params'] / 1e6:.0f} M params, {mib:.0f} MiB weights | compile "
              f"{r['compile_s']:.1f} s (peak {r['compile_peak_x']:.2f}x) | save {r['save_s']:.1f} s"
              f" | peak RSS above the model {r['peak_x']:.2f}x the weights | .pte "
              f"{r['pte_bytes'] / 2**20:.0f} MiB | {load}")
        for label, calls, enter, peak, leave in r.get("compile_stages", []) + r.get("stages", []):
            print(f"    {label:<36} x{calls:<2} RSS above the model, x the weights: start "
                  f"{enter:5.2f}  peak {peak:5.2f}  end {leave:5.2f}")


if __name__ == "__main__":
    main()
