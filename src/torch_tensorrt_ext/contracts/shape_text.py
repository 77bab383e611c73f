"""How a shape reads in a message: `shape_text((1, 16, s0))` -> "[1,16,s0]".

Invariant: the one shape printer of the package, printing as the C++ runtime's (`shape_text` in
runtime/src/blob.h, plus the executor's allocation-free `dims_text`) prints, so a refusal reads
the same in both languages; sizes may be ints or symbols, printed as `str` prints them.
"""
from __future__ import annotations

from collections.abc import Iterable


def shape_text(shape: Iterable[object]) -> str:
    return "[" + ",".join(str(s) for s in shape) + "]"
