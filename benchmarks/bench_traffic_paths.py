"""State traffic per decode step by path — within device memory, across the host-device link
(PCIe on a GPU), within host memory — per buffer kind (figures only, never a test gate).

Programs, each saved through upstream's API with the series:
* `reference/host`: the demo decoder with CPU reference engines, state on the host, run N steps;
* `reference/device`: the same with its state on cuda:0, run N steps on the emulated device (the
  runtime's counters by path, plus the program's own copy kernels);
* `tensorrt-rtx`: the demo decoder and a Qwen3-Next-shaped model (transformers' own Gated DeltaNet
  + full-attention layers at real widths, random init) with TensorRT-RTX engines built ahead of
  time — not runnable here: per call, the program's own copy kernels and the delegate's own
  copy-backs (one device copy each, its blob's `copy_back`), from the `.pte` (`inspect`); saved
  twice: as shipped (copy-back writes handed to the delegate) and with that hand-over switched
  off (every copy-back written back by the program, as before that hand-over existed).

Usage: python benchmarks/bench_traffic_paths.py [--steps 8] [--no-qwen3-next]
"""
from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path
from unittest import mock

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from torch_tensorrt_ext import reference, runtime_lib  # noqa: E402
from torch_tensorrt_ext.demo.models import Decoder  # noqa: E402
from torch_tensorrt_ext.executorch.saving import lower  # noqa: E402
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte  # noqa: E402
from torch_tensorrt_ext.executorch.running.program import load  # noqa: E402

KINDS = ("KV", "copy-back")


def _kind(fqn: str, kv: set) -> str:
    return "KV" if fqn in kv else "copy-back"


def _row(label: str, per_kind: dict[str, dict[str, int]]) -> None:
    for kind in KINDS:
        p = per_kind.get(kind)
        if p is None:
            continue
        print(f"  {label:<62} {kind:<10} device {p['device']:>10}  link {p['link']:>10}  "
              f"host {p['host']:>10}   (B/step, {p['n']} buffers)")


def _sum(by_fqn: dict[str, dict[str, int]], kv: set) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for fqn, paths in by_fqn.items():
        acc = out.setdefault(_kind(fqn, kv), {"device": 0, "link": 0, "host": 0, "n": 0})
        for p in ("device", "link", "host"):
            acc[p] += paths.get(p, 0)
        acc["n"] += 1
    return out


def run_reference(device: str, steps: int, tmp: Path) -> None:
    torch.manual_seed(0)
    model = Decoder(layers=3).eval()
    ep, compiled = reference.export_program(copy.deepcopy(model), model.example_args())
    path = tmp / f"ref_{device.replace(':', '')}.pte"
    path.write_bytes(bytes(lower.to_executorch(ep, device=device).buffer))
    prog = load(path)
    for s in range(steps):
        prog.run(*model.example_args(s % model.max_len if hasattr(model, "max_len") else s))
    kv = {w.fqn for w in compiled.plan if w.is_kv}
    _row(f"demo decoder, reference, {device}", _sum(prog.state_traffic_by_path(), kv))


def _program_paths(data: bytes) -> dict[str, dict[str, int]]:
    info = inspect_pte(data).method("forward")
    return {b.fqn: {"device": b.delegate_copy_bytes, "link": b.program_link_bytes,
                    "host": b.program_copy_bytes - b.program_link_bytes} for b in info.buffers}


def run_rtx(name: str, model: torch.nn.Module, args: tuple, tmp: Path) -> None:
    import torch_tensorrt
    from rtx_env import compile_rtx
    from torch_tensorrt_ext.executorch.saving import prepare as seam
    trt = compile_rtx(torch.export.export(model, args, strict=False), args)
    kv = {w.fqn for w in trt.mutation_plan if w.is_kv}
    for label, handover in (("without hand-over", lambda p: p), ("as shipped", None)):
        path = tmp / f"{name}-{label}.pte"
        with mock.patch.object(seam, "hand_copy_backs_to_delegates",
                               handover or seam.hand_copy_backs_to_delegates):
            torch_tensorrt.save(trt, str(path), output_format="executorch",
                                arg_inputs=list(args))
        _row(f"{name}, TensorRT-RTX, {label}", _sum(_program_paths(path.read_bytes()), kv))


def qwen3_next(hidden: int = 2048):
    """transformers' Qwen3-Next, 2 layers (Gated DeltaNet + full attention) at real widths:
    16 key heads / 32 value heads of 128, conv kernel 4 — recurrent state [1, 32, 128, 128]."""
    import transformers
    from hybrid_models import HybridCacheDecoder
    cfg = transformers.Qwen3NextConfig(
        vocab_size=1024, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=16, num_key_value_heads=2, head_dim=128,
        layer_types=["linear_attention", "full_attention"], linear_num_key_heads=16,
        linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_conv_kernel_dim=4, num_experts=0, max_position_embeddings=256)
    torch.manual_seed(0)
    return HybridCacheDecoder(transformers.Qwen3NextForCausalLM(cfg).eval(), 64).eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--no-qwen3-next", action="store_true")
    args = ap.parse_args()
    runtime_lib.use_device("emulated")   # device-placed state runs on the emulated device
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print("state traffic per decode step, by path")
        run_reference("cpu", args.steps, tmp)
        run_reference("cuda:0", args.steps, tmp)
        dec = Decoder(layers=3).eval()
        run_rtx("demo decoder", dec, dec.example_args(), tmp)
        if not args.no_qwen3_next:
            q = qwen3_next()
            run_rtx("Qwen3-Next-shaped (2 layers)", q,
                    (torch.tensor([[1]]), torch.tensor([0])), tmp)
            state = {n: b.numel() * b.element_size() for n, b in q.named_buffers()
                     if not n.startswith("model.")}
            print(f"  (Qwen3-Next-shaped state bytes: {state})")


if __name__ == "__main__":
    main()
