#!/usr/bin/env python
"""Measure which ATen ops torch-tensorrt 2.14.0's converter registry accepts that the reference
engine also lowers and runs (tests/support/converter_ops.py: a one-op partition per sample, built by
seams.engine_kind.build_reference_engine, checked against eager), for fp32/bf16/fp16/int32
samples; write docs/CONVERTER_COVERAGE.md (ops accepted / refused, refusals grouped by reason)
and tests/fixtures/converter_accepted.txt (the (op, dtype) pairs every sample of which ran like
eager: tests/engines/test_converter_coverage.py keeps them accepted). Takes ~15 min on 1 core.

    .venv/bin/python scripts/converter_coverage.py [--only aten::add.Tensor ...]
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

DOC = ROOT / "docs" / "CONVERTER_COVERAGE.md"
ACCEPTED = ROOT / "tests" / "fixtures" / "converter_accepted.txt"


def _worker(journal: str, skip: set[str], only: set[str]) -> int:
    """Measure each op not in `skip`, appending to `journal` a "begin" line before it and its
    results after it (a kernel that aborts the process leaves its "begin" last)."""
    import converter_ops as c

    infos = c.opinfos_by_name()
    with open(journal, "a") as f:
        for op in c.converter_ops():
            if op.name() in skip or (only and op.name() not in only):
                continue
            f.write(json.dumps(["begin", op.name()]) + "\n")
            f.flush()
            t = time.time()
            rows = [(case.dtype, *c.check(case)) for case in c.cases(op, infos)]
            f.write(json.dumps(["done", op.name(), rows]) + "\n")
            f.flush()
            done = collections.Counter(s for _, s, _ in rows)
            print(f"{op.name():55s} {dict(done)} {time.time() - t:.1f}s", flush=True)
    return 0


def _measure(only) -> dict[str, list[tuple[str, str, str]]]:
    """op name -> [(dtype, status, reason)] for each sample; workers replaced as they die."""
    results: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        journal = Path(tmp) / "journal"
        while True:
            skip = Path(tmp) / "skip"
            skip.write_text("\n".join(results))
            code = subprocess.call([sys.executable, __file__, "--worker", str(journal),
                                    "--skip", str(skip), "--only", *sorted(only)])
            begun = None
            for line in journal.read_text().splitlines():
                rec = json.loads(line)
                begun = rec[1] if rec[0] == "begin" else None
                if rec[0] == "done":
                    results[rec[1]] = rec[2]
            if code == 0 or begun is None:
                return results
            results[begun] = [("all", "refused", f"crash: the process died (exit {code}) "
                                                 "running the engine")]
            journal.write_text("")


def _reason_class(reason: str) -> str:
    """A reason without its call-specific details (names, numbers, shapes)."""
    text = re.sub(r"\[[^\]]*\]|'[^']*'|\"[^\"]*\"|\b\d+(\.\d+)?\b", "…", reason)
    return text[:140]


def _summary(results) -> tuple[dict, dict, list]:
    """(op -> dtypes accepted, op -> refusals, ops with no converted sample)."""
    accepted, refused, none = {}, {}, []
    for op, rows in results.items():
        by_dtype = collections.defaultdict(set)
        for dtype, status, _ in rows:
            by_dtype[dtype].add(status)
        ok = sorted(d for d, s in by_dtype.items() if s == {"accepted"}
                    or s == {"accepted", "unconverted"})
        bad = [(d, r) for d, s, r in rows if s == "refused"]
        if ok:
            accepted[op] = ok
        if bad:
            refused[op] = bad
        if not ok and not bad:
            none.append((op, sorted({s for _, s, _ in rows}) or ["no sample"]))
    return accepted, refused, none


def _doc(results) -> str:
    accepted, refused, none = _summary(results)
    groups = collections.defaultdict(set)
    for op, bad in refused.items():
        for dtype, reason in bad:
            groups[_reason_class(reason)].add(f"{op} ({dtype})")
    lines = [
        "# Reference engine coverage of torch-tensorrt 2.14.0's converters",
        "",
        "Written by `scripts/converter_coverage.py` (do not edit by hand). For every ATen op",
        "`torch_tensorrt.dynamo.conversion._ConverterRegistry.DYNAMO_CONVERTERS` names, one-op",
        "partitions of PyTorch's OpInfo samples (fp32, bf16, fp16, int32; up to",
        "2 per dtype, and in bf16/fp16 the first again with its floating inputs moved off zero",
        "by 4, where half-precision accumulation shows) that the converter's capability",
        "validator accepts are built as reference",
        "engines and run against eager. An (op, dtype) is *accepted* when every such sample ran",
        "like eager — or, in bf16/fp16, as near the same call made in fp32 as eager is (to one",
        "rounding step; listed below: eager rounds inside those ops otherwise);",
        "`tests/engines/test_converter_coverage.py` keeps those accepted.",
        "",
        f"- ops named by the registry: {len(results)}",
        f"- ops with an accepted dtype: {len(accepted)} "
        f"({sum(len(v) for v in accepted.values())} (op, dtype) pairs)",
        f"- ops with a refused sample: {len(refused)}",
        f"- ops never measured (no sample, or the converter refused every sample): {len(none)}",
        "", "## Refusals, by reason", ""]
    for reason, ops in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lines += [f"- **{reason}** ({len(ops)}): " + ", ".join(sorted(ops)), ""]
    nearer = sorted(f"{op} ({dtype}): {reason.split(': ', 1)[1]}" for op, rows in results.items()
                    for dtype, status, reason in rows if status == "accepted" and reason)
    lines += ["## Accepted, differing from eager but as near the fp32 call", ""]
    lines += [f"- {row}" for row in nearer] + [""]
    lines += ["## Not measured", ""]
    lines += [f"- {op}: {', '.join(why)}" for op, why in none]
    lines += ["", "## Accepted", ""]
    lines += [f"- {op}: {', '.join(d)}" for op, d in sorted(accepted.items())]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--only", nargs="*", default=None, help="op names (aten::add.Tensor)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--skip", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return _worker(a.worker, set(Path(a.skip).read_text().split()), set(a.only or ()))
    results = _measure(set(a.only or ()))
    accepted, refused, _ = _summary(results)
    print(f"{len(accepted)} ops accepted, {len(refused)} with a refusal")
    if not a.no_write and not a.only:
        DOC.write_text(_doc(results))
        ACCEPTED.write_text("".join(f"{op} {d}\n" for op, ds in sorted(accepted.items())
                                    for d in ds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
