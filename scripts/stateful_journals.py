#!/usr/bin/env python
"""Count what scripts/generate_stateful.py runs recorded in their journals — one run's folder or
several (a 10^4 run spread over invocations and sessions with --first-chunk; a run stopped
before its end leaves its folder in $TMPDIR, generate-stateful-*) — the same counts the
generator prints, each program once (its last result). `--recheck` runs every program that did
not pass again, on the code checked out now, and counts those results: a failure that no longer
happens was fixed (or was the run's own, such as code changed under a running worker).
`--features` prints how many of the programs that passed drew each feature (the program's
`features()`: a buffer kind, a weight layout, a split, a save path, a precision, ...).

    .venv/bin/python scripts/stateful_journals.py /tmp/generate-stateful-ab12cd34 ... [--recheck]
    [--device emulated --reference-device cuda:0] [--features]
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))


def _generator():
    spec = importlib.util.spec_from_file_location("generate_stateful",
                                                  ROOT / "scripts" / "generate_stateful.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def results_of(folders, gen) -> dict:
    """program -> its last recorded result, over every gen journal of `folders`."""
    results = {}
    for folder in folders:
        for journal in sorted(Path(folder).glob("chunk*-gen.journal")):
            for rec in gen._records(journal):
                if rec[0] == "result":
                    results[rec[1]] = rec[2]
    return results


def _print_features(passed) -> None:
    counts = collections.Counter(f for p in passed for f in p.features())
    print(f"features of the {len(passed)} that passed (programs drawing each):")
    for dimension in sorted({f.split(":")[0] for f in counts}):
        values = sorted((f for f in counts if f.split(":")[0] == dimension),
                        key=lambda f: -counts[f])
        print(f"  {dimension}: " + ", ".join(f"{f.split(':', 1)[1]} {counts[f]}" for f in values))


def _check(program, args):
    """`program` checked again by the checker of its grammar (a program of several methods by
    `method_check`, one method by `stateful_check`)."""
    from method_grammar import MethodsProgram
    if isinstance(program, MethodsProgram):
        from method_check import check_methods
        return check_methods(program, device=args.reference_device)
    from stateful_check import check_program
    return check_program(program, steps=args.steps, device=args.reference_device)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--recheck", action="store_true")
    ap.add_argument("--device", help="runtime device for the recheck (e.g. emulated)")
    ap.add_argument("--reference-device", help="where reference delegates keep state (cuda:0)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--features", action="store_true")
    args = ap.parse_args(argv)
    gen = _generator()
    results = results_of(args.folders, gen)
    order = list(results)
    gen._print_summary(order, gen._summary(order, results), "+".join(args.folders))
    if args.features:
        _print_features([p for p in order if results[p].ok])
    failed = [p for p in order if not results[p].ok and not results[p].invalid]
    if not args.recheck or not failed:
        return 1 if failed else 0
    if args.device:
        from torch_tensorrt_ext import runtime_lib
        runtime_lib.use_device(args.device)
    again = {p: _check(p, args) for p in failed}
    print(f"\nrecheck of the {len(failed)} that did not pass, on the code checked out now "
          f"({os.popen(f'git -C {ROOT} rev-parse --short HEAD').read().strip()}):")
    gen._print_summary(failed, gen._summary(failed, again), "recheck")
    for p, r in again.items():
        if not r.ok and not r.invalid:
            print(f"\n{r.report(p)}")
    return 1 if any(not r.ok and not r.invalid for r in again.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
