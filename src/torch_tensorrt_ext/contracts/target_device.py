"""The device a delegate targets, as its `target_device` compile spec spells it.

Invariant: `parse_target_device` is the one reader of a device string in the package ("cpu",
"cuda", "cuda:1"; case and surrounding blanks ignored): it returns the kind and the index (None
when the text names none) or raises `UsageError` naming the text — never a bare `ValueError` or
`IndexError` from a split.
"""
from __future__ import annotations

from ..errors import UsageError

KINDS = ("cpu", "cuda")


def parse_target_device(text: str) -> tuple[str, int | None]:
    kind, sep, index = text.strip().lower().partition(":")
    if kind not in KINDS or (sep and not index.isdigit()):
        raise UsageError(f"target device {text!r}: expected 'cpu', 'cuda' or 'cuda:<index>'")
    return kind, int(index) if sep else None
