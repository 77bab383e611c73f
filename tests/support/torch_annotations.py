"""torch's `OperatorBase.py_impl` with its closure's annotations left unevaluated.

Every `run_decompositions` enters torch's `_override_composite_implicit_decomp`, which registers
~20 Python kernels on each of several hundred composite-implicit ops and takes them back:
~10^4 `py_impl` calls a decomposition. Each call defines a closure annotated
`fn: Callable[_P, _T] -> Callable[_P, _T]`, and torch/_ops.py does not postpone annotations, so
each call builds two `collections.abc.Callable` aliases (their validation included) that nothing
reads — measured by cProfile over ten drawn programs of several methods: 21 s of 107 s.

`lazy_py_impl_annotations()` recompiles torch's own source of that method, from its file, under
`from __future__ import annotations` (PEP 563) with torch._ops' globals and its line numbers, and
puts it in place for this process (the test session, the generator's workers). The function is
torch's, statement for statement; only its closure's `__annotations__` are strings.

Invariant: the replacement reads the same names, constants and variables as the method it replaces,
its closure too (checked before it is installed, else nothing is replaced: a source that is not
the loaded code), and differs only in its closure's annotations; a torch whose source cannot be
read keeps its method.
"""
from __future__ import annotations

import __future__
import ast
import inspect
import textwrap
import types


def _recompiled(fn):
    lines, first = inspect.getsourcelines(fn)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    code = compile(tree, inspect.getsourcefile(fn), "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    made: dict = {}
    exec(code, fn.__globals__, made)  # noqa: S102 - torch's own source, just read from its file
    new = made[fn.__name__]
    new.__qualname__, new.__module__, new.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    return new, tree


def _closures(code: types.CodeType) -> list[types.CodeType]:
    return [c for c in code.co_consts if isinstance(c, types.CodeType)]


def _same_code(old: types.CodeType, new: types.CodeType) -> bool:
    """`new` (recompiled with postponed annotations) reads what `old` reads: the same variables,
    no global `old` does not (the annotations' names are strings now), and closures with the same
    names, constants and variables."""
    closures = _closures(old), _closures(new)
    return (old.co_varnames == new.co_varnames and set(new.co_names) <= set(old.co_names)
            and len(closures[0]) == len(closures[1])
            and all((a.co_names, a.co_consts, a.co_varnames, a.co_freevars)
                    == (b.co_names, b.co_consts, b.co_varnames, b.co_freevars)
                    for a, b in zip(*closures, strict=True)))


def lazy_py_impl_annotations() -> bool:
    """Install the recompiled `py_impl` (True), or leave torch's (False: no readable source, or
    the source does not parse to the method's code)."""
    from torch._ops import OperatorBase
    fn = OperatorBase.py_impl
    if getattr(fn, "lazy_annotations", False):
        return True
    try:
        new, tree = _recompiled(fn)
    except (OSError, TypeError, SyntaxError):
        return False
    if len(tree.body) != 1 or not _same_code(fn.__code__, new.__code__):
        return False
    new.lazy_annotations = True
    OperatorBase.py_impl = new
    return True


__all__ = ["lazy_py_impl_annotations"]
