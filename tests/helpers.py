"""Paths and small measures every test layer shares (one place, not a copy per test file)."""
from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"


def buffer_nbytes(model, fqn: str) -> int:
    """Bytes of buffer `fqn` of `model`: what one copy of it moves."""
    b = model.get_buffer(fqn)
    return b.numel() * b.element_size()
