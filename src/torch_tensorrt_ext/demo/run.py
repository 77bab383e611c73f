"""The main job: the embedded decoder through the whole CPU pipeline, step by step against eager.

Invariant: every figure printed comes from the run itself — parity from comparing the `.pte`'s
outputs and eager's at each step, bytes moved from `Program.state_traffic()` (runtime counters
plus the emitted program's copy ops).
"""
from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Dict, List

import torch

from .models import Decoder


def run_demo(steps: int = 8, layers: int = 3, pte: str = "") -> Dict:
    from .. import reference
    from ..executorch.program import load

    model = Decoder(layers=layers).eval()
    eager = copy.deepcopy(model)
    args = model.example_args()
    ep, compiled = reference.export_program(model, args)
    path = pte or str(Path(tempfile.mkdtemp(prefix="tte-demo-")) / "decoder.pte")
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
