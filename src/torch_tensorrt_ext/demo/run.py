"""The main job: the embedded decoder through the whole CPU pipeline, step by step against eager.

Invariant: every figure printed comes from the run itself — parity from comparing the `.pte`'s
outputs and eager's at each step, bytes moved from `Program.state_traffic()` (runtime counters
plus the emitted program's copy ops). Arguments that cannot give a meaningful run (no steps,
more steps than the KV cache has positions, no layers, a `.pte` destination that cannot be
written) are refused with `DemoArgumentError` before anything is exported. Without `pte` the
`.pte` goes to a temporary directory that is removed when the run ends, however it ends (and
the result's "pte" is "").
"""
from __future__ import annotations

import copy
import inspect
import tempfile
from pathlib import Path
from typing import Dict, List

import torch

from .models import Decoder

CACHE_POSITIONS = inspect.signature(Decoder).parameters["s_max"].default


class DemoArgumentError(ValueError):
    """Demo arguments refused before exporting; the message names the argument and the fix."""


def check_demo_args(steps: int, layers: int, pte: str) -> None:
    if steps < 1:
        raise DemoArgumentError(f"--steps {steps}: must be at least 1 (each step is one decode "
                                f"step compared against eager)")
    if steps > CACHE_POSITIONS:
        raise DemoArgumentError(f"--steps {steps}: the decoder's KV cache holds "
                                f"{CACHE_POSITIONS} positions; use 1..{CACHE_POSITIONS}")
    if layers < 1:
        raise DemoArgumentError(f"--layers {layers}: must be at least 1")
    if pte:
        from ..executorch.pte_write import DestinationError, check_destination
        try:
            check_destination(pte)
        except DestinationError as e:
            raise DemoArgumentError(f"--pte {e}") from None


def run_demo(steps: int = 8, layers: int = 3, pte: str = "") -> Dict:
    check_demo_args(steps, layers, pte)
    if pte:
        return _run(steps, layers, pte)
    with tempfile.TemporaryDirectory(prefix="tte-demo-") as tmp:
        result = _run(steps, layers, str(Path(tmp) / "decoder.pte"))
    result["pte"] = ""  # written to the temporary directory, now removed
    return result


def _run(steps: int, layers: int, path: str) -> Dict:
    from .. import reference
    from ..executorch.program import load

    model = Decoder(layers=layers).eval()
    eager = copy.deepcopy(model)
    args = model.example_args()
    ep, compiled = reference.export_program(model, args)
    from ..executorch.lower import save_pte
    save_pte(ep, path)
    prog = load(path)
    per_step: List[Dict] = []
    max_diff = 0.0
    for step in range(steps):
        x, pos = model.example_args(pos=step)
        with torch.no_grad():
            want = eager(x, pos)
        got = prog.run(x, pos)[0]
        diff = float((want - got).abs().max())
        max_diff = max(max_diff, diff)
        per_step.append({"step": step, "max_abs_diff": diff,
                         "parity": bool(torch.allclose(want, got, atol=1e-5, rtol=1e-5))})
    traffic = prog.state_traffic()
    buffers = []
    for w in compiled.plan:
        nbytes = eager.get_buffer(w.fqn).numel() * eager.get_buffer(w.fqn).element_size()
        buffers.append({"fqn": w.fqn, "kind": w.kind.name, "nbytes": nbytes,
                        "bytes_moved_per_step": traffic[w.fqn], "reason": w.reason})
    return {"steps": steps, "parity": all(s["parity"] for s in per_step),
            "max_abs_diff": max_diff, "per_step": per_step, "buffers": buffers,
            "plan": str(compiled.plan), "pte": path}
