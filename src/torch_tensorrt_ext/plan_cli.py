"""`torch-tensorrt-ext plan`: print the mutation plan of an embedded example or a saved program.

Invariant: prints exactly what `plan_mutations` returns (text or `--json`) — or, with
`--engine reference`, the plan the compiled module carries (`module.mutation_plan`: engine
bindings and who copies each write, as the compile decided with CPU reference engines); exit
status 0 unless the program cannot be loaded, planned or compiled (then 2, with the error).
"""
from __future__ import annotations

import argparse

EXAMPLES = ("decoder",)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="print the mutation plan (KV_ALIAS / COPY_BACK per buffer)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--example", choices=EXAMPLES, help="an embedded example model")
    src.add_argument("--program", metavar="FILE.pt2", help="a torch.export.save()d program")
    p.add_argument("--layers", type=int, default=4, help="layers of the example decoder")
    p.add_argument("--torch-executed-ops", nargs="*", default=(), metavar="OP",
                   help="ops left to PyTorch, e.g. aten.index_copy.default")
    p.add_argument("--engine", choices=("reference",), default=None,
                   help="compile with CPU reference engines and print the compiled module's plan "
                        "(engine bindings; copier ENGINE or PROGRAM as decided); without it, the "
                        "plan before any engine exists (a copy-back write is PROGRAM's)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from .lowering import plan_mutations

    try:
        if args.example:
            from .demo.models import export_decoder
            program = export_decoder(layers=args.layers)
        else:
            program = torch.export.load(args.program)
        if args.engine == "reference":
            from . import reference
            plan = reference.compile(program, torch_executed_ops=args.torch_executed_ops).plan
        else:
            plan = plan_mutations(program, torch_executed_ops=args.torch_executed_ops)
    except (OSError, RuntimeError, ValueError) as e:   # PlanError is a ValueError
        print(f"error: {e}")
        return 2
    print(plan.to_json() if args.json else plan)
    return 0
