"""The package's one base exception.

Invariant: every exception class this package defines derives from `TteError` and keeps the
built-in base it had (ValueError, RuntimeError, KeyError), so `except TteError` catches any of
them and code that catches the built-in base still does. This module imports nothing.
"""
from __future__ import annotations


class TteError(Exception):
    """Base of the errors torch-tensorrt-ext raises on purpose; the message says what and why."""


# The built-in kinds a caller may already catch, each as one of ours (no module of this package
# raises a bare built-in exception: tests/house/test_house_rules.py).

class UsageError(TteError, ValueError):
    """A call's arguments or a program's shape this package cannot take (says which and why)."""


class ArgumentTypeError(TteError, TypeError):
    """An argument of a type this package does not take."""


class UnknownName(TteError, KeyError):
    """A name (method, buffer, binding) the program or record does not have; says which it has."""


class Unsupported(TteError, NotImplementedError):
    """Something valid this package does not do yet; says what to do instead."""


class OutOfRange(TteError, IndexError):
    """An index or dimension outside what it indexes."""


class MissingDependency(TteError, ImportError):
    """An optional package a step needs is not importable; says which and how to install it."""


class ExecutionError(TteError, RuntimeError):
    """Running a program or an engine failed, or cannot start here; says why."""
