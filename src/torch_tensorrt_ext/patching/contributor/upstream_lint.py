"""Upstream's hooks on the series: only what the series introduces, never what upstream ships.

Invariant: `lint_series(hooks, pristine, patched, bin_dir)` runs the hook set on the pristine
files and on the same files patched (repository path -> bytes; the paths the series touches)
and calls a finding on a patched file *upstream's* when the pristine file has the same finding
(same hook, file and message or rewrite, line numbers aside): first the one at the line the
patch carries the finding's line to (the pristine and patched lines paired by a line diff),
then any other left unpaired (the patch moved it). Every patched finding left over is
*introduced by the series*. The report counts, per hook, findings on the patched files, those
that are upstream's and those introduced, lists each introduced one with the patches that
touch its file, and lists the hooks that never see a file of the series and why.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import gitapply
from ..errors import PatchError
from .hook_findings import Finding, lines_of, tree_findings
from .release_repo import release_files
from .upstream_hooks import HookSet, tool_env

__all__ = ["LintReport", "introduced", "lint_release", "lint_series", "touched_by"]


@dataclass
class LintReport:
    """The hooks' verdict on one target's series."""

    target: str
    lines: list[str] = field(default_factory=list)
    introduced: list[Finding] = field(default_factory=list)


def line_map(before: bytes, after: bytes) -> dict[int, int]:
    """Line of `after` -> the line of `before` it is (1-based), for lines a diff leaves alone."""
    matcher = difflib.SequenceMatcher(None, lines_of(before), lines_of(after), autojunk=False)
    return {b + k + 1: a + k + 1 for a, b, n in matcher.get_matching_blocks() for k in range(n)}


def introduced(pristine: Sequence[Finding], patched: Sequence[Finding],
               maps: Mapping[str, dict[int, int]]) -> list[Finding]:
    """The patched findings with no like finding on the pristine file (see the invariant)."""
    pool: dict[tuple[str, str, str], list[int]] = {}
    for f in pristine:
        pool.setdefault(f.key, []).append(f.line)
    left = []
    for f in patched:                      # first: the same finding on the same (mapped) line
        was = maps.get(f.path, {}).get(f.line)
        if was is not None and was in pool.get(f.key, []):
            pool[f.key].remove(was)
        else:
            left.append(f)
    out = []
    for f in left:                         # then: the same finding moved by the patch
        if pool.get(f.key):
            pool[f.key].pop()
        else:
            out.append(f)
    return out


def lint_series(hooks: HookSet, pristine: Mapping[str, bytes], patched: Mapping[str, bytes],
                bin_dir: Path | None, touched_by: Mapping[str, Sequence[str]] | None = None
                ) -> LintReport:
    """Run upstream's hooks on both versions of the series' files and compare."""
    before = tree_findings(hooks, pristine, bin_dir)
    after = tree_findings(hooks, patched, bin_dir)
    maps = {p: line_map(pristine[p], patched[p]) for p in patched if p in pristine}
    report = LintReport(hooks.target)
    for hook in hooks.hooks:
        if hook.id not in after:
            report.lines.append(f"  {hook.label:<28} no file of the series is one it checks")
            continue
        new = introduced(before.get(hook.id, []), after[hook.id], maps)
        report.introduced += new
        total = len(after[hook.id])
        report.lines.append(f"  {hook.label:<28} {total} finding(s) on the patched files: "
                            f"{total - len(new)} upstream's (on the pristine files too), "
                            f"{len(new)} introduced by the series")
        for f in new:
            by = ", ".join((touched_by or {}).get(f.path, ()))
            report.lines.append(f"      {_short(f)}" + (f"  (file patched by {by})" if by else ""))
    report.lines += [f"  not run: {why}" for why in hooks.not_run]
    return report


def _short(f: Finding, width: int = 160) -> str:
    text = str(f)
    return text if len(text) <= width else text[:width - 3] + "..."


def touched_by(series) -> dict[str, list[str]]:
    """Repository path -> the numbers of the series' patches that modify it ("0002", ...)."""
    out: dict[str, list[str]] = {}
    for patch in series.patches:
        for rp in (*patch.files, *patch.test_files):
            out.setdefault(rp, []).append(patch.name[:4])
    return out


def lint_release(site: Path, manifest, series, hooks: HookSet) -> LintReport:
    """The hooks on the pinned release's files the series touches (the release checkout's
    bytes: installed files, or their recorded pristine copies, and upstream's pinned tests),
    before and after the whole series (every section, tests included)."""
    files = [*series.files, *series.test_files]
    release = release_files(site, manifest, series.target.name)
    patched, results = gitapply.apply_series(release, series.patches, which="all")
    stuck = [r.patch.name for r in results if r.outcome is gitapply.Outcome.CONFLICT]
    if stuck:
        raise PatchError(f"{series.target.name}: {stuck[0]} does not apply to the release "
                         f"checkout, so upstream's hooks cannot judge it; fix the series first")
    bin_dir = tool_env(hooks, files)
    return lint_series(hooks, {p: release[p] for p in files}, {p: patched[p] for p in files},
                       bin_dir, touched_by(series))
