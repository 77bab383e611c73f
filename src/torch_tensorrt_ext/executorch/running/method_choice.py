"""Which method of a loaded program a call runs: the one named, else the program's default.

Invariant: the default method is `forward` when the program has one, else its only method, else
none — a program opens whatever its methods are called, and only a call that names no method of a
program without a default is refused, naming the methods to choose from. A name the program lacks
is refused naming its methods. The C++ runner (`tte_run --method`) follows the same rule.
"""
from __future__ import annotations

from collections.abc import Sequence

from ...errors import TteError, UsageError

__all__ = ["NoSuchMethodError", "default_method", "method_to_run"]

DEFAULT = "forward"


class NoSuchMethodError(TteError, KeyError):
    """A method name the `.pte` does not have; the message names the file and its methods."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


def default_method(names: Sequence[str]) -> str | None:
    """`forward` if among `names`, else the only name, else None."""
    if DEFAULT in names:
        return DEFAULT
    return names[0] if len(names) == 1 else None


def method_to_run(path: str, names: Sequence[str], method: str | None) -> str:
    """`method` when the program has it, else (None) the default; refused naming the choices."""
    if method is None:
        method = default_method(names)
        if method is None:
            raise UsageError(
                f"{path} has no method {DEFAULT!r} and {len(names)} methods, "
                f"{sorted(names)}: name the one to run, run(*inputs, method=NAME)")
    if method not in names:
        raise NoSuchMethodError(f"{path} has no method {method!r}; it has {sorted(names)}")
    return method
