"""Which engines the patched `torch_tensorrt.compile` builds: TensorRT (default) or CPU reference.

Invariant: with `reference_engines()` active, every partition torch-tensorrt's own partitioner
hands to `convert_module` is built by `engines.reference_engine.build_reference_engine` instead of
TensorRT (the same partitions, binding names and aliased I/O: that module says how). Outside the
context nothing changes. This module is the switch only.
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from ..engines.reference_engine import build_reference_engine

_KIND = contextvars.ContextVar("tte_engine_kind", default="tensorrt")
KINDS = ("tensorrt", "reference")


@contextlib.contextmanager
def reference_engines() -> Iterator[None]:
    """`torch_tensorrt.compile` inside this block builds CPU reference engines."""
    token = _KIND.set("reference")
    try:
        yield
    finally:
        _KIND.reset(token)


def engine_kind() -> str:
    return _KIND.get()


def engine_builder(convert_module):
    """torch-tensorrt's `convert_module`, or the reference builder when reference engines are on."""
    return build_reference_engine if engine_kind() == "reference" else convert_module
