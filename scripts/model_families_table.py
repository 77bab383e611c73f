#!/usr/bin/env python
"""The model families of tests/support/model_families.py through the product path (reference
engines), as one markdown table: per family and written buffer, the plan (KV / copy-back / written
by a host op), whether the compiled module and the `.pte` step like eager for 8 steps (outputs and
every buffer eager changes), the bytes the delegates copy per call and what `inspect` says keeps
a buffer on a host path.

    .venv/bin/python scripts/model_families_table.py [FAMILY ...]
    TTE_DEVICE=emulated TTE_REFERENCE_DEVICE=cuda:0 .venv/bin/python scripts/...   (device state)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))


def main(kinds) -> int:
    from model_families import FAMILIES, STEPS, ModelProgram
    from stateful_check import check_program
    from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
    print("| family | buffer | plan | parity (8 steps) | copied/call (B) | host path |")
    print("|---|---|---|---|---|---|")
    failed = 0
    for kind in kinds or FAMILIES:
        seen, start = {}, time.time()
        program = ModelProgram(kind)
        result = check_program(program, steps=STEPS, observe=seen.__setitem__)
        failed += not result.ok
        plan = {w.fqn: w for w in seen.get("plan", [])}
        info = {b.fqn: b for b in inspect_pte(seen["pte"]).method("forward").buffers} \
            if "pte" in seen else {}
        parity = "equal" if result.ok else f"FAILED ({result.stage})"
        for fqn in program.fqns():
            w = plan.get(fqn)
            kind_of = "-" if w is None else "host op" if w.engine is None else \
                "KV" if w.is_kv else "copy-back"
            host = info[fqn].host_path if fqn in info else ""
            print(f"| {kind} | `{fqn}` | {kind_of} | {parity} | "
                  f"{seen.get('traffic', {}).get(fqn, '-')} | {host} |")
        print(f"<!-- {kind}: {time.time() - start:.0f} s -->", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
