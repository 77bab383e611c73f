"""ctest fixture step: writes the reference payloads, TR03 blobs and delegated .pte files the C++
runtime tests read (written by the Python side, so the C++ reader is tested on them).

Invariant: every file is regenerated from tests/runtime_helpers.py's engines on each run (into
the directory given as argv[1]); nothing here is committed.
"""
import os
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(root / "src"), str(root / "tests")]

import runtime_helpers as H  # noqa: E402

RUNNER_CASES = ("demo_decoder", "gated_deltanet_states")   # runtime/tests/CMakeLists.txt

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
    for name, data in files.items():
        tmp = out / (name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, out / name)
        print(f"wrote {out / name} ({len(data)} bytes)")
    # the example runner's cases (runtime.tte_run.*): state on cuda:0, eager's outputs beside
    for case in RUNNER_CASES:
        H.write_runner_case(out / "runner" / case, case, 8)
        print(f"wrote {out / 'runner' / case}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
