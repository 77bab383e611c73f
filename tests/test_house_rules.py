"""House rules the linters do not check (issue 9 item 5 and DESIGN's conventions): no Python
function of the package runs past 60 lines, and every module states its invariant in a docstring.

Read from the source with `ast`, so a new module or function is held to the rules the moment it
is written.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "torch_tensorrt_ext"
MAX_LINES = 60


def _trees():
    for path in sorted(ROOT.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def test_no_function_longer_than_sixty_lines():
    long = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    assert long == []


def test_every_module_states_its_invariant():
    bare = [str(p.relative_to(ROOT)) for p, tree in _trees()
            if p.stat().st_size and not ast.get_docstring(tree)]
    assert bare == []


BUILTINS = {"ValueError", "RuntimeError", "TypeError", "KeyError", "IndexError",
            "NotImplementedError", "AssertionError", "LookupError", "OSError", "Exception"}


def test_no_bare_builtin_exception_is_raised():
    """The package raises its own errors (`errors.TteError` and kin, each keeping its built-in
    base), so `except TteError` catches whatever it raises on purpose; a module `__getattr__`'s
    AttributeError is the protocol's, not a choice."""
    bare = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            exc = node.exc if isinstance(node, ast.Raise) else None
            name = exc.func if isinstance(exc, ast.Call) else exc
            if isinstance(name, ast.Name) and name.id in BUILTINS:
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno} {name.id}")
    assert bare == []
