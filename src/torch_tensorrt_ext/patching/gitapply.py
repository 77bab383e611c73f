"""Run git, and apply a series with `git apply` inside a throw-away tree.

Invariant: patches are only ever applied by git itself, in a private temporary directory that git
cannot mistake for part of a repository (discovery stops at the directory; user and system git
configuration are ignored), so the caller's files and repositories are never touched here. Each
patch is applied whole or not at all; results say exactly how (clean, at an offset, only with
reduced context, already present, or not at all), with git's own words.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from collections.abc import Mapping, Sequence

from .errors import PatchError
from .series import Patch

_OFFSET = re.compile(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)\.")
_FUZZ = re.compile(r"Context reduced to \((\d+)/(\d+)\) to apply fragment at (\d+)")


class Outcome(StrEnum):
    CLEAN = "clean"
    OFFSET = "applies with offset"
    FUZZ = "applies with fuzz"
    UPSTREAM = "already applied"
    CONFLICT = "conflicts"


@dataclass(frozen=True)
class Result:
    patch: Patch
    outcome: Outcome
    notes: tuple[str, ...] = ()   # git's lines that explain the outcome

    @property
    def applied(self) -> bool:
        return self.outcome in (Outcome.CLEAN, Outcome.OFFSET, Outcome.FUZZ)


def git(args: Sequence[str], cwd: Path, *, env: Mapping[str, str] | None = None,
        check: bool = True, what: str = "") -> subprocess.CompletedProcess:
    """Run `git args` in `cwd`; on failure (check=True) raise PatchError with git's output."""
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, env=dict(env) if env else None,
                              capture_output=True)
    except FileNotFoundError:
        raise PatchError("git is not installed or not on PATH; the patch tooling applies "
                         "patches with git (install git)") from None
    if check and proc.returncode != 0:
        out = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip()
        raise PatchError(f"{what or 'git ' + ' '.join(args[:2])} failed in {cwd}: {out}")
    return proc


def isolated_env(tree: Path) -> dict[str, str]:
    """Environment for git in `tree`: no repository discovery above it, no user/system config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CEILING_DIRECTORIES=str(tree.parent), GIT_CONFIG_NOSYSTEM="1",
               GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C", LANG="C")
    return env


def apply_series(files: Mapping[str, bytes], patches: Sequence[Patch], *, fuzz: bool = False,
                 keep_going: bool = False, detect_upstream: bool = False, which: str = "site"
                 ) -> tuple[dict[str, bytes], list[Result]]:
    """Apply `patches` in order to `files` (repository path -> bytes) in a temporary tree.

    `which` picks the sections applied (`Patch.sections`): the installed files' (the default),
    the upstream test files' or all; a patch with no section of that kind applies trivially.

    Returns the files after every patch that applied, and one result per patch attempted. A patch
    that does not apply leaves the tree as it was; without `keep_going` the series stops there.
    `fuzz` allows a patch to apply with reduced context (`git apply -C1`); `detect_upstream`
    recognises a patch whose change is already present (it applies in reverse).
    """
    with tempfile.TemporaryDirectory(prefix="tte-apply-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        for repo_path, data in files.items():
            dest = tree / repo_path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        env = isolated_env(tree)
        results: list[Result] = []
        for patch in patches:
            touched = {"site": patch.files, "tests": patch.test_files}.get(which, True)
            result = (_apply_one(tree, env, patch, which, fuzz, detect_upstream) if touched
                      else Result(patch, Outcome.CLEAN))
            results.append(result)
            if not result.applied and result.outcome is not Outcome.UPSTREAM and not keep_going:
                break
        return {p: (tree / p).read_bytes() for p in files}, results


def _apply_one(tree: Path, env: Mapping[str, str], patch: Patch, which: str, fuzz: bool,
               detect_upstream: bool) -> Result:
    patch_file = tree.parent / "current.patch"
    patch_file.write_bytes(patch.sections(which))
    base = ["apply", "--verbose", "--whitespace=nowarn", str(patch_file)]
    proc = git(base, tree, env=env, check=False)
    if proc.returncode == 0:
        return _success(patch, proc, Outcome.CLEAN)
    failure = _lines(proc)
    if fuzz:
        proc = git(["apply", "-C1", *base[1:]], tree, env=env, check=False)
        if proc.returncode == 0:
            return _success(patch, proc, Outcome.FUZZ)
    if detect_upstream:
        proc = git(["apply", "--reverse", "--check", *base[1:]], tree, env=env, check=False)
        if proc.returncode == 0:
            return Result(patch, Outcome.UPSTREAM, ("its change is already present (it applies "
                                                    "in reverse)",))
    return Result(patch, Outcome.CONFLICT, tuple(_failure_lines(failure)))


def _success(patch: Patch, proc: subprocess.CompletedProcess, outcome: Outcome) -> Result:
    lines = _lines(proc)
    fuzzed = [ln for ln in lines if _FUZZ.search(ln)]
    if outcome is Outcome.FUZZ and not fuzzed:
        outcome = Outcome.CLEAN
    offsets = [ln for ln in lines if _OFFSET.search(ln)]
    if outcome is Outcome.CLEAN and offsets:
        outcome = Outcome.OFFSET
    current = None
    notes = []
    for ln in lines:
        if ln.startswith("Checking patch "):
            current = ln[len("Checking patch "):].rstrip(".")
        elif _OFFSET.search(ln) or _FUZZ.search(ln):
            notes.append(f"{current}: {ln}")
    return Result(patch, outcome, tuple(notes))


def _lines(proc: subprocess.CompletedProcess) -> list[str]:
    text = (proc.stdout + proc.stderr).decode("utf-8", "replace")
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()]


def _failure_lines(lines: list[str]) -> list[str]:
    """git's verdict lines (`error: patch failed: path:line` ...), without the echoed context."""
    keep = [ln for ln in lines if ln.startswith(("error: patch failed", "error: ")) and
            not ln.startswith("error: while searching for")]
    return keep or lines[-3:]
