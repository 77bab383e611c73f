"""`torch-tensorrt-ext demo`: the embedded decoder through `torch_tensorrt.compile` and
`torch_tensorrt.save` into a `.pte` stepped in ExecuTorch (the README's main job).

Invariant: exit status 0 only when every step matched eager (or, `--engine tensorrt-rtx`, when
the engines were built and saved: they cannot run here, parity is null); `--json` prints exactly
one object `{"engine", "ran", "steps", "parity", "max_abs_diff", "buffers": [{"fqn", "kind",
"nbytes", "bytes_moved_per_step"}], "engines": [...]}` (`engines`: a saved program's delegates,
with their aliased I/O and copy-backs, when it was not run); progress goes to stderr.
Arguments refused before exporting (`--steps` outside 1..cache positions, `--layers` < 1, an
unwritable `--pte`, an engine this machine cannot build or run) exit 2 with one line on stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="export the embedded decoder to .pte and run it against eager")
    p.add_argument("--steps", type=int, default=8,
                   help="decode steps to compare against eager, 1..the KV cache positions")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--pte", default="", help="where to write the .pte (default: a temp dir)")
    p.add_argument("--engine", default="reference",
                   choices=("reference", "tensorrt-rtx", "tensorrt"),
                   help="reference: CPU reference engines (runs here); tensorrt-rtx: TensorRT-RTX "
                        "engines built ahead of time and inspected (not runnable here); "
                        "tensorrt: TensorRT engines run on a GPU runner")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--verbose", action="store_true",
                   help="also ExecuTorch's informational log lines (cpuinfo probing, ...)")
    p.set_defaults(func=run)


def _say(quiet: bool):
    def say(msg: str) -> None:
        if not quiet:
            print(f"[demo] {msg}", file=sys.stderr, flush=True)
    return say


def run(args: argparse.Namespace) -> int:
    from .demo.run import DemoArgumentError, run_demo
    if args.verbose:
        os.environ["TTE_VERBOSE"] = "1"   # read when ExecuTorch's log lines are routed
    try:
        r = run_demo(steps=args.steps, layers=args.layers, pte=args.pte, engine=args.engine,
                     say=_say(args.quiet))
    except DemoArgumentError as e:
        print(f"torch-tensorrt-ext demo: error: {e}", file=sys.stderr)
        return 2
    ok = r["parity"] if r["ran"] else True
    if args.json:
        print(json.dumps({"engine": r["engine"], "ran": r["ran"], "steps": r["steps"],
                          "parity": r["parity"], "max_abs_diff": r["max_abs_diff"],
                          "buffers": [{k: b[k] for k in ("fqn", "kind", "nbytes",
                                                         "bytes_moved_per_step")}
                                      for b in r["buffers"]],
                          "engines": r.get("engines", [])}))
        return 0 if ok else 1
    print(r["plan"])
    if not r["ran"]:
        print(f"\n{r['engine']}: engines built and saved, not run (no machine here can run them)")
        for e in r["engines"]:
            print(f"  delegate {e['delegate']}: {e['magic']}, {e['engine_bytes']} engine bytes, "
                  f"aliased {e['aliased_io']}")
    print(f"\n.pte: {r['pte'] or 'in a temporary directory, removed (--pte PATH keeps it)'}\n")
    for s in r["per_step"]:
        print(f"step {s['step']}: {'parity' if s['parity'] else 'MISMATCH'} with eager "
              f"(max abs diff {s['max_abs_diff']:.2e})")
    print()
    width = max(len(b["fqn"]) for b in r["buffers"])
    print(f"{'buffer':<{width}}  {'kind':<9}  {'bytes':>8}  {'moved/step':>10}")
    for b in r["buffers"]:
        print(f"{b['fqn']:<{width}}  {b['kind']:<9}  {b['nbytes']:>8}  "
              f"{b['bytes_moved_per_step']:>10}")
    kv = sum(b["bytes_moved_per_step"] for b in r["buffers"] if b["kind"] == "KV_ALIAS")
    cb = sum(b["bytes_moved_per_step"] for b in r["buffers"] if b["kind"] == "COPY_BACK")
    what = "per step" if r["ran"] else "per step, as saved (copy ops in the program)"
    print(f"\n{what}: KV buffers {kv} bytes moved, copy-back buffers {cb} bytes moved")
    return 0 if ok else 1
