"""What a clean merge can still break: the Python files a series touches, checked after the
series lands on a checkout (`patch import`, with or without --3way).

Invariant: `tree_problems(top, paths, base)` returns one line `path:line: what` per problem in
the working-tree files `paths` (repository-relative) that the same files at commit `base` (the
upstream the series sits on) do not have: a file Python cannot compile, and — with ruff (the
project's linter; next to this interpreter or on PATH) — an undefined name (F821) or an unused
import (F401), what a hunk merged onto a changed upstream typically leaves behind (a name the
upstream no longer defines). Without ruff it says so in one line instead of passing silently.
It changes no file of the checkout.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from collections.abc import Sequence

from ..gitapply import git

__all__ = ["NOT_CHECKED", "tree_problems"]

NOT_CHECKED = "undefined names not checked"


def _ruff() -> str:
    here = Path(sys.executable).with_name("ruff")
    return str(here) if here.exists() else (shutil.which("ruff") or "")


def _problems(root: Path, files: Sequence[str], ruff: str) -> list[str]:
    problems = []
    for p in files:
        try:
            compile((Path(root) / p).read_bytes(), p, "exec")
        except SyntaxError as e:
            problems.append(f"{p}:{e.lineno}: does not compile: {e.msg}")
    if not ruff or not files:
        return problems
    proc = subprocess.run([ruff, "check", "--no-cache", "--isolated", "--select", "F821,F401",
                           "--output-format", "concise", "--", *files], cwd=root,
                          capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        path, _, rest = line.partition(":")
        if path in files and rest[:1].isdigit() and "invalid-syntax" not in rest:
            lineno, _, after = rest.partition(":")
            problems.append(f"{path}:{lineno}:{after.partition(':')[2].rstrip()}")
    return problems


def _what(problem: str) -> str:
    path, _, rest = problem.partition(":")
    return f"{path}:{rest.partition(':')[2]}"     # the line number moves with upstream's edits


def _compiles(data: bytes) -> bool:
    try:
        compile(data, "<upstream>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def tree_problems(top: Path, paths: Sequence[str], base: str | None = None) -> list[str]:
    files = [p for p in paths if p.endswith(".py") and (Path(top) / p).is_file()]
    ruff = _ruff()
    if base is None:
        return _problems(Path(top), files, ruff) + _unchecked(files, ruff)
    with tempfile.TemporaryDirectory(prefix="tte-base-") as tmp:
        there = []
        for p in files:
            blob = git(["cat-file", "blob", f"{base}:{p}"], Path(top), check=False)
            if blob.returncode == 0:
                if not _compiles(blob.stdout):
                    continue        # not Python upstream either: nothing to hold it to
                (Path(tmp) / p).parent.mkdir(parents=True, exist_ok=True)
                (Path(tmp) / p).write_bytes(blob.stdout)
            there.append(p)
        files = [p for p in files if p in there]
        known = {_what(x) for x in _problems(Path(tmp), [p for p in files
                                                         if (Path(tmp) / p).exists()], ruff)}
    found = [x for x in _problems(Path(top), files, ruff) if _what(x) not in known]
    return found + _unchecked(files, ruff)


def _unchecked(files: Sequence[str], ruff: str) -> list[str]:
    return [f"{NOT_CHECKED}: ruff is not installed (pip install ruff)"] if files and not ruff \
        else []
