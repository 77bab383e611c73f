"""The main job: the embedded decoder as a model author ships it — `torch_tensorrt.compile` →
`torch_tensorrt.save(output_format="executorch")` → the `.pte` stepped in ExecuTorch — against
eager.

Invariant: every figure printed comes from the run itself — parity from comparing the `.pte`'s
outputs and eager's at each step, bytes moved from `Program.state_traffic()` (runtime counters
plus the emitted program's copy ops); with TensorRT-RTX engines (built here, not runnable here)
nothing is run and the figures are the saved program's (`inspect_pte`: its copy ops plus the
delegates' own copy-backs), parity `None`. Arguments
that cannot give a meaningful run (no steps, more steps than the KV cache has positions, no
layers, a `.pte` destination that cannot be written) are refused with `DemoArgumentError` before
anything is exported. Without `pte` the
`.pte` goes to a temporary directory that is removed when the run ends, however it ends (and
the result's "pte" is "").
"""
from __future__ import annotations

import copy
import inspect
import tempfile
from pathlib import Path
from collections.abc import Callable

import torch

from ..errors import TteError
from .models import Decoder

CACHE_POSITIONS = inspect.signature(Decoder).parameters["s_max"].default


class DemoArgumentError(TteError, ValueError):
    """Demo arguments refused before exporting; the message names the argument and the fix."""


def check_demo_args(steps: int, layers: int, pte: str, engine: str = "reference"):
    """The torch_tensorrt module for `engine`; `DemoArgumentError` for anything meaningless."""
    if steps < 1:
        raise DemoArgumentError(f"--steps {steps}: must be at least 1 (each step is one decode "
                                f"step compared against eager)")
    if steps > CACHE_POSITIONS:
        raise DemoArgumentError(f"--steps {steps}: the decoder's KV cache holds "
                                f"{CACHE_POSITIONS} positions; use 1..{CACHE_POSITIONS}")
    if layers < 1:
        raise DemoArgumentError(f"--layers {layers}: must be at least 1")
    if pte:
        from ..executorch.saving.pte_write import DestinationError, check_destination
        try:
            check_destination(pte)
        except DestinationError as e:
            raise DemoArgumentError(f"--pte {e}") from None
    from .pipeline import EngineUnavailable, check_engine
    try:
        return check_engine(engine)
    except EngineUnavailable as e:
        raise DemoArgumentError(str(e)) from None


def run_demo(steps: int = 8, layers: int = 3, pte: str = "", engine: str = "reference",
             say: Callable[[str], None] = lambda _msg: None) -> dict:
    torch_tensorrt = check_demo_args(steps, layers, pte, engine)
    if pte:
        return _run(torch_tensorrt, steps, layers, pte, engine, say)
    with tempfile.TemporaryDirectory(prefix="tte-demo-") as tmp:
        result = _run(torch_tensorrt, steps, layers, str(Path(tmp) / "decoder.pte"), engine, say)
    result["pte"] = ""  # written to the temporary directory, now removed
    return result


def _run(torch_tensorrt, steps: int, layers: int, path: str, engine: str, say) -> dict:
    from .pipeline import compile_and_save

    model = Decoder(layers=layers).eval()
    eager = copy.deepcopy(model)
    trt = compile_and_save(torch_tensorrt, model, model.example_args(), path, engine, say)
    plan = trt.mutation_plan
    size = {w.fqn: eager.get_buffer(w.fqn).numel() * eager.get_buffer(w.fqn).element_size()
            for w in plan}
    result = {"engine": engine, "steps": steps, "plan": str(plan), "pte": path}
    if engine == "tensorrt-rtx":
        return {**result, **_built_only(path, plan, size, say)}
    from ..executorch.running.program import load
    say(f"running {steps} decode steps in ExecuTorch against eager ...")
    prog = load(path)
    per_step: list[dict] = []
    max_diff = 0.0
    for step in range(steps):
        x, pos = model.example_args(pos=step)
        with torch.no_grad():
            want = eager(x, pos)
        got = prog.run(x, pos)[0].cpu()
        diff = float((want - got).abs().max())
        max_diff = max(max_diff, diff)
        per_step.append({"step": step, "max_abs_diff": diff,
                         "parity": bool(torch.allclose(want, got, atol=1e-5, rtol=1e-5))})
    traffic = prog.state_traffic()
    buffers = [{"fqn": w.fqn, "kind": w.kind.name, "nbytes": size[w.fqn],
                "bytes_moved_per_step": traffic[w.fqn], "reason": w.reason} for w in plan]
    return {**result, "ran": True, "parity": all(s["parity"] for s in per_step),
            "max_abs_diff": max_diff, "per_step": per_step, "buffers": buffers}


def _built_only(path: str, plan, size: dict[str, int], say) -> dict:
    """TensorRT-RTX engines cannot run here: report what the saved program holds instead."""
    from ..executorch.inspecting.inspect_pte import inspect_pte
    info = inspect_pte(Path(path).read_bytes()).method("forward")
    say("TensorRT-RTX engines were built ahead of time; no machine here can run them "
        "(no CUDA device, or compute capability 9.0): nothing was run")
    copies = {b.fqn: b.program_copy_bytes + b.delegate_copy_bytes for b in info.buffers}
    # a plan kept as named data (TR03 version 5) is counted where it is, under its key
    engines = [{"delegate": d.index, "magic": d.magic,
                "engine_bytes": d.plan[1] if d.plan else d.engine_bytes,
                "plan_key": d.plan[0] if d.plan else None,
                "aliased_io": [list(a) for a in d.aliased_io],
                "copy_back": [list(c) for c in d.copy_back]} for d in info.delegates]
    buffers = [{"fqn": w.fqn, "kind": w.kind.name, "nbytes": size[w.fqn],
                "bytes_moved_per_step": copies.get(w.fqn, 0), "reason": w.reason} for w in plan]
    return {"ran": False, "parity": None, "max_abs_diff": None, "per_step": [],
            "buffers": buffers, "engines": engines}
