"""How far the Python blob reader's JSON refusals follow the C++ reader's: the
differential corpus (`tests/contracts/test_blob_differential.py`:
hand-made hostile blobs and 3,300 seeded mutations) goes through both readers; prints, per
corpus, how many blobs they accept/refuse differently (must be 0) and how many they refuse under
different `json.*` check ids (a text with several JSON defects: C++ names the first in document
order, `contracts.blob_json` the first `json.loads` meets), with the pairs. Figures only; the
differential test holds the rule.

Usage: python scripts/blob_json_order_probe.py
"""
from __future__ import annotations

import collections
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "support"), str(REPO / "tests" / "contracts")]

import test_blob_differential as D  # noqa: E402


def main() -> None:
    for label, cases in (("hostile", list(D.hostile_cases())),
                         ("mutations", list(D.mutation_cases()))):
        verdicts = [(D.python_verdict(data), D.cpp_verdict(data)) for _, data in cases]
        accept = sum(py[0] != cpp[0] for py, cpp in verdicts)
        ids = collections.Counter((cpp[1], py[1]) for py, cpp in verdicts
                                  if py[1] != cpp[1] and D.same_json_refusal(py, cpp))
        print(f"{label}: {len(cases)} blobs, accept/refuse differ {accept}, json check id "
              f"differs {sum(ids.values())} (C++ -> python): "
              + ", ".join(f"{a} -> {b} x{n}" for (a, b), n in ids.most_common()))


if __name__ == "__main__":
    main()
