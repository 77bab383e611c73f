"""Checks of one `tte_run` run of a device case (tests/support/device_cases.py's case folder),
in the standard library alone: the GPU tier runs them where only python3 and pytest are.

Invariant: each check returns the list of what is wrong (empty: all good), naming the case, the
step, the output or the buffer:

* `eager_mismatches`: every output of every step equals eager's (want.<s>.<j>.bin) — floats
  within `RTOL`/`ATOL` (ExecuTorch's CPU kernels, which the reference engine runs, are not
  ATen's: last-bit differences), every other dtype byte for byte;
* `byte_mismatches`: two runs wrote the same bytes for every output (a GPU run against the same
  program's host run, a caller's stream against the default stream);
* `summary_mismatches`: the runner's JSON summary — every copy the delegate made stayed in
  device memory, each buffer moved exactly the bytes expect.json names, a reset + rerun gave
  identical outputs.
"""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

RTOL, ATOL = 1.3e-6, 1e-5
# float dtypes as struct codes (bfloat16: the upper half of a float32)
_FLOATS = {"float32": "f", "float64": "d", "float16": "e", "bfloat16": "bf16"}


def expectations(case: Path) -> dict:
    return json.loads((Path(case) / "expect.json").read_text())


def summary_of(stdout: str) -> dict:
    """The runner's JSON summary: its last stdout line."""
    return json.loads(stdout.strip().splitlines()[-1])


def _floats(data: bytes, dtype: str) -> list[float]:
    code = _FLOATS[dtype]
    if code == "bf16":
        data = b"".join(b"\0\0" + data[i:i + 2] for i in range(0, len(data), 2))
        code = "f"
    return list(struct.unpack(f"<{len(data) // struct.calcsize(code)}{code}", data))


def _close(got: list[float], want: list[float]) -> tuple[bool, float]:
    worst, ok = 0.0, True
    for g, w in zip(got, want, strict=True):
        if math.isnan(g) or math.isnan(w):
            ok &= math.isnan(g) and math.isnan(w)
            continue
        d = abs(g - w)
        worst = max(worst, d)
        ok &= d <= ATOL + RTOL * abs(w)
    return ok, worst


def eager_mismatches(case: Path, run: Path) -> tuple[list[str], float]:
    """(what differs from eager, the largest float difference seen)."""
    case, run = Path(case), Path(run)
    bad, worst = [], 0.0
    for s, outs in enumerate(expectations(case)["outputs"]):
        for j, out in enumerate(outs):
            want = (case / f"want.{s}.{j}.bin").read_bytes()
            got_path = run / f"out.{s}.{j}.bin"
            got = got_path.read_bytes() if got_path.exists() else None
            where = f"{case.name} step {s} output {j}"
            if got is None or len(got) != len(want):
                bad.append(f"{where}: {None if got is None else len(got)} bytes, eager "
                           f"{len(want)}")
            elif out["dtype"] in _FLOATS:
                ok, diff = _close(_floats(got, out["dtype"]), _floats(want, out["dtype"]))
                worst = max(worst, diff)
                if not ok:
                    bad.append(f"{where}: differs from eager by {diff:.3g}")
            elif got != want:
                bad.append(f"{where} ({out['dtype']}): differs from eager")
    return bad, worst


def byte_mismatches(case: Path, a: Path, b: Path) -> list[str]:
    """Outputs whose bytes differ between runs `a` and `b` of the case (or that one lacks)."""
    outs = expectations(case)["outputs"]
    bad = []
    for s, step_outs in enumerate(outs):
        for j in range(len(step_outs)):
            pa, pb = Path(a) / f"out.{s}.{j}.bin", Path(b) / f"out.{s}.{j}.bin"
            if not (pa.exists() and pb.exists() and pa.read_bytes() == pb.read_bytes()):
                bad.append(f"{Path(case).name} step {s} output {j}: {Path(a).name} and "
                           f"{Path(b).name} differ")
    return bad


def summary_mismatches(case: Path, summary: dict, reset: bool) -> list[str]:
    name, expect = Path(case).name, expectations(case)
    bad = []
    for fqn, (_device, link, host) in summary.get("copy_paths", {}).items():
        if link or host:   # every copy the delegate makes stays in device memory
            bad.append(f"{name}: {fqn} copied {link} B across the host-device link, {host} B "
                       f"on the host")
    if summary.get("copy_bytes") != expect["copy_bytes"]:
        bad.append(f"{name}: copied {summary.get('copy_bytes')} B per buffer, expected "
                   f"{expect['copy_bytes']}")
    if summary.get("steps") not in (None, expect["steps"]):
        bad.append(f"{name}: ran {summary.get('steps')} steps, expected {expect['steps']}")
    if reset and summary.get("reset") is not True:
        bad.append(f"{name}: after reset() the same steps gave other outputs")
    return bad
