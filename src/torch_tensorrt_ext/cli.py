"""The `torch-tensorrt-ext` command line.

Invariant: this module only dispatches. Each sub-command lives in its own module, which exposes
`register(subparsers)` adding one parser whose `func(args) -> int` runs it; the exit status is
that function's return value.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# One module per sub-command, in the order `--help` lists them.
COMMAND_MODULES = (
    "torch_tensorrt_ext.plan_cli",
    "torch_tensorrt_ext.demo_cli",
    "torch_tensorrt_ext.inspect_cli",
    "torch_tensorrt_ext.patching.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torch-tensorrt-ext",
        description="Stateful models through Torch-TensorRT into ExecuTorch.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
