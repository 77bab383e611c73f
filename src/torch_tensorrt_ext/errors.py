"""The package's one base exception.

Invariant: every exception class this package defines derives from `TteError` and keeps the
built-in base it had (ValueError, RuntimeError, KeyError), so `except TteError` catches any of
them and code that catches the built-in base still does. This module imports nothing.
"""
from __future__ import annotations


class TteError(Exception):
    """Base of the errors torch-tensorrt-ext raises on purpose; the message says what and why."""
