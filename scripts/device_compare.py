"""Check one `tte_run` case of `.devrun/cases/<name>` (scripts/device_run.sh; numpy only): every
output of every step equals eager's (`want.<s>.<j>.npy`, float tolerance 1e-5 absolute + 1.3e-6
relative, exact otherwise) and the runner's JSON summary (its last stdout line, in SUMMARY) has
exactly the expected bytes copied per buffer, every one of them within device memory (none across
the host-device link or on the host). Prints one line; exits 1 on a mismatch."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main(case: str, summary_path: str) -> int:
    d = Path(case)
    expect = json.loads((d / "expect.json").read_text())
    summary = json.loads(Path(summary_path).read_text().strip().splitlines()[-1])
    worst = 0.0
    for want_path in sorted(d.glob("want.*.npy")):
        _, s, j, _ = want_path.name.split(".")
        want = np.load(want_path)
        got = np.fromfile(d / f"out.{s}.{j}.bin", dtype=want.dtype).reshape(want.shape)
        if want.dtype.kind == "f":
            err = float(np.max(np.abs(got - want))) if want.size else 0.0
            worst = max(worst, err)
            if not np.allclose(got, want, rtol=1.3e-6, atol=1e-5):
                print(f"FAIL {d.name}: step {s} output {j} differs by {err}")
                return 1
        elif not np.array_equal(got, want):
            print(f"FAIL {d.name}: step {s} output {j} differs")
            return 1
    if summary.get("reset") is False:
        print(f"FAIL {d.name}: after reset() the same steps gave other outputs")
        return 1
    for fqn, (_device, link, host) in summary.get("copy_paths", {}).items():
        if link or host:   # every copy the delegate makes stays in device memory
            print(f"FAIL {d.name}: {fqn} copied {link} B across the link, {host} B on the host")
            return 1
    if summary["copy_bytes"] != expect["copy_bytes"]:
        print(f"FAIL {d.name}: copied {summary['copy_bytes']}, expected {expect['copy_bytes']}")
        return 1
    print(f"ok {d.name}: {expect['steps']} steps equal eager (max abs diff {worst:.2e}), "
          f"device {summary['device']}, delegate copies {summary['copy_bytes']} "
          f"(all device-to-device), "
          f"engine staging {summary['staging_bytes']} B"
          + (", reset + rerun identical" if summary.get("reset") else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
