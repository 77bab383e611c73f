"""On the GPU machine: a model exported on CUDA reaches ExecuTorch's emitter with
every value it serializes in host memory (`executorch.saving.host_values`), and the emitter's way of
reading a value — a host dereference of the storage's data pointer (ctypes) — is what kills a
process when the value is a CUDA tensor. Needs only torch with a CUDA device (that machine's
python3); imports the package's pure-torch module from src/. Prints one JSON line; exit 1 on any
failed check.

Usage (there): python3 scripts/device_host_values.py
"""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from torch_tensorrt_ext.executorch.saving.host_values import host_values  # noqa: E402


class Decoder(torch.nn.Module):
    """A KV cache (index_copy), a ring buffer and a step counter, with weights."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.register_buffer("k_cache", torch.randn(1, 2, 16, 4))
        self.register_buffer("ring", torch.randn(3, 8))
        self.register_buffer("step", torch.tensor([5]))

    def forward(self, x, pos):
        h = self.proj(x)
        self.k_cache.index_copy_(2, pos, h.view(1, 2, 1, 4))
        self.ring.copy_(torch.cat([self.ring[1:], h], dim=0))
        self.step.add_(1)
        return h + self.k_cache.sum() + self.ring.sum(0)


def host_read(t: torch.Tensor) -> bytes:
    """What ExecuTorch 1.5.1's emitter does to serialize a value (emit/_emitter.py)."""
    s = t.untyped_storage()
    return bytes(ctypes.cast(s.data_ptr(), ctypes.POINTER(ctypes.c_char * s.nbytes())).contents)


_READ_CUDA = """
import ctypes, torch
t = torch.arange(1024, dtype=torch.float32, device="cuda")
s = t.untyped_storage()
bytes(ctypes.cast(s.data_ptr(), ctypes.POINTER(ctypes.c_char * s.nbytes())).contents)
print("read")
"""


def main() -> int:
    assert torch.cuda.is_available(), "no CUDA device"
    model = Decoder().cuda().eval()
    args = (torch.randn(1, 8, device="cuda"), torch.tensor([3], device="cuda"))
    ep = torch.export.export(model, args)
    on_cuda = sorted(k for k, v in {**ep.state_dict, **ep.constants}.items()
                     if isinstance(v, torch.Tensor) and v.is_cuda)
    out = host_values(ep)
    checks = {
        "exported_on_cuda": on_cuda,
        "all_host_after": all(v.device.type == "cpu" for v in {**out.state_dict,
                                                              **out.constants}.values()),
        "values_equal": all(torch.equal(out.state_dict[k], ep.state_dict[k].cpu())
                            for k in ep.state_dict),
        "parameters_stay_parameters": all(
            isinstance(out.state_dict[k], torch.nn.Parameter) == isinstance(v, torch.nn.Parameter)
            for k, v in ep.state_dict.items()),
        "source_program_untouched": sorted(k for k, v in ep.state_dict.items() if v.is_cuda)
        == [k for k in on_cuda if k in ep.state_dict],
        "emitter_read_of_host_copy_matches": all(
            host_read(out.state_dict[k]) == host_read(ep.state_dict[k].cpu())
            for k in ep.state_dict),
    }
    child = subprocess.run([sys.executable, "-c", _READ_CUDA], capture_output=True, text=True,
                           timeout=120)
    checks["emitter_read_of_cuda_tensor_kills_the_process"] = (
        child.returncode != 0 and "read" not in child.stdout)
    checks["child_returncode"] = child.returncode
    ok = (checks["exported_on_cuda"] and all(
        v for k, v in checks.items() if k not in ("exported_on_cuda", "child_returncode")))
    print(json.dumps({"ok": bool(ok), "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(0), **checks}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
