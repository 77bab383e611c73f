"""ctest fixture step: writes the reference payloads, TR03 blobs and delegated .pte files the C++
runtime tests read (written by the Python side, so the C++ reader is tested on them).

Invariant: every file is regenerated from tests/support/runtime_helpers.py's engines on each run (into
the directory given as argv[1]); nothing here is committed.
"""
import os
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(root / "src"), str(root / "tests" / "support")]

import device_cases  # noqa: E402
import runtime_helpers as H  # noqa: E402

RUNNER_CASES = ("demo_decoder", "gated_deltanet_states")   # runtime/tests/CMakeLists.txt

def _weights_blob() -> bytes:
    """A reference engine whose weights are named data (a version-4 blob with "weights"), as a
    fuzz seed: the harness hands init the named data the blob names."""
    import tempfile
    import torch
    import torch_tensorrt_ext as tte

    class Stepper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.proj = torch.nn.Linear(16, 16)
            self.register_buffer("state", torch.zeros(1, 16))

        def forward(self, x):
            new = self.proj(x) + self.state
            self.state.copy_(new)
            return new

    with tempfile.TemporaryDirectory() as d:
        pte = Path(tte.reference.export(Stepper().eval(), (torch.randn(1, 16),),
                                        f"{d}/w.pte")).read_bytes()
    return pte[H.blob_in_pte(pte)]


def _dynamic_blob() -> bytes:
    """A stateless reference engine with a dynamic dimension: x [1, s, 8] (s up to 16) -> 2x + 1."""
    import tempfile
    import torch
    import torch_tensorrt_ext as tte

    class Affine(torch.nn.Module):
        def forward(self, x):
            return x * 2 + 1

    x = torch.randn(1, 4, 8)
    ep = torch.export.export(Affine(), (x,),
                             dynamic_shapes=({1: torch.export.Dim("s", min=1, max=16)},))
    with tempfile.TemporaryDirectory() as d:
        pte = Path(tte.reference.export(ep, (x,), f"{d}/dyn.pte")).read_bytes()
    return pte[H.blob_in_pte(pte)]


def _plan_blob() -> bytes:
    """A TensorRT engine whose plan is named data (a version-5 blob with "engine_data" and an
    empty payload), as a fuzz seed for the reader: kv_step's bindings, a plan key of 4096 bytes."""
    import dataclasses
    import hashlib
    from torch_tensorrt_ext.contracts import blob as B

    plan = bytes(4096)
    meta = dataclasses.replace(H.kv_step_spec().metadata(["tok", "pos", "cache", "step"]),
                               engine_kind="tensorrt", engine_data=B.EngineData(
                                   B.KEY_PREFIX + hashlib.sha256(plan).hexdigest(), len(plan)))
    return B.serialize(meta, b"")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    kv = H.kv_step_spec()
    files = {
        # delegate args in the outer program's order: tok, pos, cache, step
        "kv_step.blob": kv.blob(["tok", "pos", "cache", "step"]),
        "ring.blob": H.ring_spec().blob(["x", "ring"]),
        "ring_planned_io.blob": H.ring_spec(planned_io=True).blob(["x", "ring"]),
        "kv_step_outer.pte": H.delegated_pte(
            H.KvStepOuter(), {k: kv.inputs[k] for k in ("tok", "pos", "cache", "step")}, kv),
    }
    files["weights_linear.blob"] = _weights_blob()
    files["plan_named.blob"] = _plan_blob()
    files["dynamic_affine.blob"] = _dynamic_blob()
    for name, data in files.items():
        tmp = out / (name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, out / name)
        print(f"wrote {out / name} ({len(data)} bytes)")
    # the example runner's cases (runtime.tte_run.*): state on cuda:0, eager's outputs beside
    for case in RUNNER_CASES:
        device_cases.write_case(out / "runner" / case, case, 8)
        print(f"wrote {out / 'runner' / case}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
