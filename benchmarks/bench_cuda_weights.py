"""Bytes the patched CUDA weight collector writes for buffers that view 1/8 of a 64 MiB tensor.

For each view, AOTInductor's value is its compact clone (``clone_preserve_strides``) and its
TensorProperties describe the original view. Printed per case: the view's own bytes, the clone's
span, the base storage, the bytes written to the storage file (what the .ptd carries) and the
time to materialize. The written bytes must equal the clone's span, never the base storage;
the script exits non-zero otherwise. Stock executorch 1.5.1 rejects these exports (shown too;
its copy is recovered from the installed file with ``git apply -R`` when that is patched).

    .venv/bin/python benchmarks/bench_cuda_weights.py
"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch._inductor.utils import clone_preserve_strides
from torch.export.pt2_archive._package_weights import TensorProperties, Weights

REPO = Path(__file__).resolve().parents[1]
PATCH = REPO / "patches/executorch/0001-cuda-accept-AOTInductor-s-compact-clones-of-view-buf.patch"
REPO_PATH = "backends/cuda/cuda_weight_collector.py"
MiB = 1 << 20


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def collectors(scratch: Path):
    """(patched, stock): the installed module if patched, else a patched copy; a pristine copy."""
    installed = Path(
        importlib.util.find_spec("executorch.backends.cuda.cuda_weight_collector").origin)
    is_patched = "torch_tensorrt_ext.cuda import" in installed.read_text()
    for name in ("stock", "patched"):
        target = scratch / name / REPO_PATH
        target.parent.mkdir(parents=True)
        shutil.copyfile(installed, target)
    flags = ["-R"] if is_patched else []
    subprocess.run(["git", "apply", *flags, str(PATCH)],
                   cwd=scratch / ("stock" if is_patched else "patched"), check=True)
    stock = load(scratch / "stock" / REPO_PATH, "bench_stock_collector")
    if is_patched:
        import executorch.backends.cuda.cuda_weight_collector as patched

        return patched, stock
    return load(scratch / "patched" / REPO_PATH, "bench_patched_collector"), stock


def span(t: torch.Tensor) -> int:
    spread = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    return (spread + 1) * t.element_size()


def main() -> int:
    base = torch.arange(64 * MiB // 4, dtype=torch.float32).reshape(4096, 4096)  # 64 MiB
    cases = {
        "rows base[512:1024]": (lambda v: clone_preserve_strides(v), base[512:1024]),
        "cols base[:, 1024:1536]": (lambda v: clone_preserve_strides(v), base[:, 1024:1536]),
        "cols, low-memory .cpu() copy": (lambda v: clone_preserve_strides(v).clone(),
                                         base[:, 1024:1536]),
    }
    failures = 0
    with tempfile.TemporaryDirectory() as scratch:
        patched, stock = collectors(Path(scratch) / "collectors")
        print(f"collector: {patched.__file__}")
        print(f"base storage: {base.untyped_storage().nbytes():>12,} B")
        print(f"{'case':30} {'view B':>12} {'clone span B':>13} {'value B':>12} "
              f"{'written B':>12} {'ms':>7}")
        for name, (make_value, view) in cases.items():
            value = make_value(view)
            weights = Weights({"buf": (value, TensorProperties(view))})
            directory = Path(scratch) / name.replace(" ", "_").replace("/", "_")
            directory.mkdir()
            start = time.perf_counter()
            artifact = patched.CudaWeightCollector().materialize(weights, str(directory),
                                                                 lambda _: 1)
            elapsed = (time.perf_counter() - start) * 1e3
            (entry,) = artifact.entries
            written = len(artifact.storages[entry.storage_key])
            view_bytes = view.numel() * view.element_size()
            print(
                f"{name:30} {view_bytes:>12,} {span(view):>13,} "
                f"{value.untyped_storage().nbytes():>12,} {written:>12,} {elapsed:>7.1f}"
            )
            if written != span(view) or written == base.untyped_storage().nbytes():
                print(f"  FAIL: wrote {written} B, expected the clone's span {span(view)} B")
                failures += 1
            for data in artifact.storages.values():
                data.close()
            try:
                stock.CudaWeightCollector().materialize(weights, str(directory), lambda _: 1)
                print("  stock 1.5.1: accepted")
            except RuntimeError as error:
                print(f"  stock 1.5.1: {error}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
