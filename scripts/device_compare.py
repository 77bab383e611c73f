"""Check one `tte_run` run of a device case folder (ctest's runtime.tte_run.* cases; the standard
library only): every output equals eager's and the runner's JSON summary (its last stdout line,
in SUMMARY) copied exactly the expected bytes per buffer, all within device memory, with a reset +
rerun identical where it ran one — tests/support/device_outputs.py's checks. Prints one line;
exits 1 on a mismatch.

Usage: python3 scripts/device_compare.py CASE_DIR SUMMARY
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from device_outputs import eager_mismatches, summary_mismatches, summary_of  # noqa: E402


def main(case: str, summary_path: str) -> int:
    d = Path(case)
    summary = summary_of(Path(summary_path).read_text())
    bad, worst = eager_mismatches(d, d)
    bad += summary_mismatches(d, summary, reset=summary.get("reset") is not None)
    if bad:
        print("FAIL " + "; ".join(bad[:5]))
        return 1
    print(f"ok {d.name}: {summary['steps']} steps equal eager (max abs diff {worst:.2e}), "
          f"device {summary['device']}, delegate copies {summary['copy_bytes']} "
          f"(all device-to-device)" + (", reset + rerun identical" if summary["reset"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
