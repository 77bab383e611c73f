"""`torch-tensorrt-ext inspect MODEL.pte`: what a saved program holds.

Invariant: everything printed comes from `executorch.inspecting.inspect_pte.inspect_pte` on the
file's bytes;
`--json` prints exactly one JSON object (`PteInfo.to_dict()`); exit status 0 when the file was
read, 1 (with the reason on stderr) when it is not a readable `.pte`. `--verify` checks that the
methods hold one state (`executorch.inspecting.program_state`: each buffer one allocation, no
method's memory on another's state) and, with `--source P.pt2`, the program's state writes against
the program it was saved from (`executorch.inspecting.verify_writes`): exit 1 naming method,
buffer and writers when one is lost, duplicated or not shared.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="methods, delegates and state of a saved .pte")
    p.add_argument("pte", help="the .pte file")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--verify", action="store_true",
                   help="check that the methods hold one state, and every state write against "
                        "--source when given (exit 1 naming what is wrong)")
    p.add_argument("--source", help="with --verify: the program it was saved from "
                   "(torch.export.save's .pt2)")
    p.set_defaults(func=run)


def _verify(args: argparse.Namespace, data: bytes, info) -> int:
    import torch

    from .executorch import verify
    from .executorch.inspecting.program_state import ProgramStateError
    from .executorch.inspecting.verify_writes import WriteVerifyError
    if not args.source:
        for fault in info.state_faults:
            print(f"torch-tensorrt-ext inspect: {args.pte}: {fault}", file=sys.stderr)
        if info.state_faults:
            return 1
        print(f"{args.pte}: its methods hold one state (state writes not verified: no --source, "
              "the exported program it was saved from)")
        return 0
    try:
        verify(data, torch.export.load(args.source))
    except (WriteVerifyError, ProgramStateError) as e:
        print(f"torch-tensorrt-ext inspect: {args.pte}: {e}", file=sys.stderr)
        return 1
    print(f"{args.pte}: every state write verified against {args.source}")
    return 0


def _text(info) -> str:
    lines = []
    for m in info.methods:
        lines.append(f"method {m.name}: {len(m.delegates)} delegate(s), {len(m.buffers)} "
                     "mutable buffer(s)")
        for d in m.delegates:
            if not d.magic:
                lines.append(f"  delegate {d.index}: {d.backend}")
                continue
            aliased = ", ".join(f"{o}->{i}" for o, i in d.aliased_io) or "none"
            copied = ", ".join(f"{o}->{i}" for o, i in d.copy_back) or "none"
            lines.append(f"  delegate {d.index}: {d.backend} {d.magic} {d.engine_kind} engine, "
                         f"{d.engine_bytes} bytes, {len(d.bindings)} bindings, aliased: {aliased}; "
                         f"copies back: {copied}")
            if d.weights:
                external = sum(not here for _, _, here in d.weights)
                lines.append(f"    weights: {len(d.weights)} tensors, "
                             f"{sum(n for _, n, _ in d.weights)} bytes of named data, "
                             + (f"{external} in an external data file (.ptd)" if external
                                else "in the .pte"))
            if d.plan:
                key, nbytes, here = d.plan
                lines.append(f"    plan: {nbytes} bytes of named data {key}, "
                             + ("in the .pte" if here else "in an external data file (.ptd)"))
        if m.buffers:
            width = max(len(b.fqn) for b in m.buffers)
            lines.append(f"  {'buffer':<{width}}  {'kind':<9} {'dtype':<8} {'shape':<16} "
                         f"{'bytes':>9}  device  init  copied/call  over-link  binding")
            for b in m.buffers:
                where = f"delegate {b.delegate}:{b.binding}" if b.binding else "-"
                lines.append(f"  {b.fqn:<{width}}  {b.kind:<9} {b.dtype:<8} "
                             f"{str(list(b.shape)):<16} {b.nbytes:>9}  {b.device:<6}  "
                             f"{'yes' if b.initial_value else 'NO':<4}  "
                             f"{b.program_copy_bytes:>11}  {b.program_link_bytes:>9}  {where}")
            for b in m.buffers:
                if b.host_path:
                    how = "written" if b.kind == "in_place" else "copied"
                    lines.append(f"  {b.fqn}: {how} by the program: {b.host_path}")
    keys = {k for m in info.methods for d in m.delegates for k, _, _ in d.weights}
    uses = sum(len(d.weights) for m in info.methods for d in m.delegates)
    if uses > len(keys):
        lines.append(f"weights: {len(keys)} named-data tensors serve {uses} engine weights "
                     "(stored once, shared across methods)")
    plans = [d.plan[0] for m in info.methods for d in m.delegates if d.plan]
    if len(plans) > len(set(plans)):
        lines.append(f"plans: {len(set(plans))} named-data plans serve {len(plans)} engines "
                     "(stored once, deserialized once per key)")
    for a in info.shared:
        lines.append(f"state shared by every method: {a.nbytes} bytes on {a.device}, one "
                     "allocation: " + ", ".join(f"{f}@{o}" for f, o in a.buffers)
                     + " (planned buffer " + ", ".join(f"{m}:{i}" for m, i in a.methods) + ")")
    lines += [f"STATE FAULT: {fault}" for fault in info.state_faults]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import struct

    from .executorch.inspecting.inspect_pte import inspect_pte
    from .executorch.inspecting.pte_check import PteError, read_pte
    path = Path(args.pte)
    try:
        data = read_pte(path)
        info = inspect_pte(data)   # header checked before the flatbuffer is read
    except PteError as e:
        print(f"torch-tensorrt-ext inspect: {e}", file=sys.stderr)
        return 1
    except (ValueError, RuntimeError, struct.error, IndexError) as e:
        print(f"torch-tensorrt-ext inspect: {path}: not a readable .pte: {e}", file=sys.stderr)
        return 1
    if args.verify:
        return _verify(args, data, info)
    print(json.dumps(info.to_dict()) if args.json else _text(info))
    return 0
