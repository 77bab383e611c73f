"""What upstream's hooks say about one tree of files (a release's, or the same files patched).

Invariant: `tree_findings(hooks, files, bin_dir)` writes `files` (repository path -> bytes) into a
scratch folder laid out as upstream's checkout is for its tools (the hook set's config files at
the root, upstream's root folders, an `__init__.py` in every folder of a package root), runs each
hook on the paths it applies to, and returns one `Finding` per thing a hook objects to: a region
a fixing tool rewrites, a line a reporting tool names, a line a grep hook matches, a file not
ending in exactly one newline. Every hook sees the files as given (a fixer's rewrite is undone
before the next hook). A finding's `key` leaves out where it is (line numbers), so the same
finding can be recognised in another version of the file. A tool that fails without saying
why, or a file of a kind whose hook is not pinned, raises `PatchError`; `files` is not changed.
"""
from __future__ import annotations

import difflib
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import PatchError
from ..gitapply import git, isolated_env
from .upstream_hooks import Hook, HookSet

_REPORTED = re.compile(r"^(?P<path>[^:\s][^:]*):(?P<line>\d+):(?:\d+:)?\s*(?P<what>.*)$")
_LINE_REF = re.compile(r"\bline \d+")


@dataclass(frozen=True)
class Finding:
    """One objection of one hook, at `line` (1-based) of `path`."""

    hook: str
    path: str
    line: int
    what: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.hook, self.path, _LINE_REF.sub("line N", self.what))

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: [{self.hook}] {self.what}"


def lines_of(data: bytes) -> list[str]:
    return data.decode("utf-8", "surrogateescape").splitlines(keepends=True)


def changed_regions(hook: str, path: str, before: bytes, after: bytes) -> list[Finding]:
    """One finding per region a fixer changed: at its first line, keyed by the text it replaces
    and the text it puts there."""
    old, new = lines_of(before), lines_of(after)
    out = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        change = "".join(f"-{x!r}" for x in old[i1:i2]) + "".join(f"+{x!r}" for x in new[j1:j2])
        out.append(Finding(hook, path, i1 + 1, f"would rewrite {i2 - i1} line(s) as {j2 - j1}: "
                                                f"{change}"))
    return out


def _layout(root: Path, hooks: HookSet, files: Mapping[str, bytes]) -> None:
    git(["init", "-q"], root, env=isolated_env(root))    # a checkout, as the hooks expect
    for name, text in hooks.config.items():
        (root / name).write_text(text)
    for d in hooks.root_dirs:
        (root / d).mkdir(exist_ok=True)
    for rp, data in files.items():
        (root / rp).parent.mkdir(parents=True, exist_ok=True)
        (root / rp).write_bytes(data)
    for top in (root / pkg for pkg in hooks.package_roots):
        if top.is_dir():
            for folder in [top, *(p for p in top.rglob("*") if p.is_dir())]:
                if not (folder / "__init__.py").exists():
                    (folder / "__init__.py").write_bytes(b"")


def _argv(hook: Hook, bin_dir: Path, paths: Sequence[str], tmp: str) -> list[str]:
    tool = bin_dir / hook.argv[0]
    with open(tool, "rb") as f:            # a console script runs with the environment's python
        script = f.read(2) == b"#!"       # (its #! line names where the environment was made)
    argv = [str(bin_dir / "python"), str(tool)] if script else [str(tool)]
    for a in hook.argv[1:]:
        argv += list(paths) if a == "{files}" else [a.replace("{tmp}", tmp)]
    return argv


def _run_tool(hook: Hook, root: Path, bin_dir: Path, paths: Sequence[str]) -> tuple[int, str]:
    with tempfile.TemporaryDirectory(prefix="tte-hook-") as tmp:
        try:
            proc = subprocess.run(_argv(hook, bin_dir, paths, tmp), cwd=root, text=True,
                                  env=isolated_env(root), capture_output=True, errors="replace")
        except OSError as exc:         # open() of a missing tool, or exec() of a broken one
            raise PatchError(f"upstream's hook {hook.label} could not start ({exc}); install its "
                             f"tools again (scripts/setup.sh)") from None
    return proc.returncode, proc.stdout + proc.stderr


def _failed(hook: Hook, rc: int, output: str) -> PatchError:
    tail = "; ".join(output.strip().splitlines()[-3:])
    return PatchError(f"upstream's hook {hook.label} failed (exit status {rc}) without naming a "
                      f"finding: {tail or 'no output'}; run it by hand on the files to see why")


def _reported(hook: Hook, root: Path, bin_dir: Path, paths: Sequence[str]) -> list[Finding]:
    rc, output = _run_tool(hook, root, bin_dir, paths)
    out = []
    for line in output.splitlines():
        m = _REPORTED.match(line.strip())
        if m:
            path = m["path"].removeprefix("./").removeprefix(f"{root}/")
            if path in paths:
                out.append(Finding(hook.id, path, int(m["line"]), m["what"].strip()))
    if rc != 0 and not out:
        raise _failed(hook, rc, output)
    return out


def _fixed(hook: Hook, root: Path, bin_dir: Path, paths: Sequence[str]) -> list[Finding]:
    before = {p: (root / p).read_bytes() for p in paths}
    rc, output = _run_tool(hook, root, bin_dir, paths)
    out = []
    for p, data in before.items():
        out += changed_regions(hook.id, p, data, (root / p).read_bytes())
        (root / p).write_bytes(data)
    if rc not in (0, 1) or (rc == 1 and not out):
        raise _failed(hook, rc, output)
    return out


def _local(hook: Hook, path: str, data: bytes) -> list[Finding]:
    if hook.mode == "newline":
        ok = data == b"" or (data.endswith(b"\n") and not data.endswith(b"\n\n"))
        return [] if ok else [Finding(hook.id, path, max(1, len(lines_of(data))),
                                      "the file does not end in exactly one newline")]
    assert hook.pattern is not None
    return [Finding(hook.id, path, i, f"matches {hook.pattern.pattern!r}: {text.strip()}")
            for i, text in enumerate(lines_of(data), 1) if hook.pattern.search(text)]


def hook_paths(hook: Hook, files: Sequence[str]) -> list[str]:
    """The paths of `files` the hook runs on; a kind of file whose hook is unpinned is refused."""
    paths = [p for p in files if hook.applies(p)]
    if paths and hook.mode == "unpinned":
        raise PatchError(f"the series touches {paths[0]}, a file upstream's {hook.label} checks, "
                         f"whose settings are not pinned: add them to the hook in hooks.toml")
    return paths


def tree_findings(hooks: HookSet, files: Mapping[str, bytes], bin_dir: Path | None
                  ) -> dict[str, list[Finding]]:
    """Hook id -> its findings on `files` (a hook that runs on none of them is left out)."""
    out: dict[str, list[Finding]] = {}
    runs = [(hook, hook_paths(hook, sorted(files))) for hook in hooks.hooks]   # refuses first
    with tempfile.TemporaryDirectory(prefix="tte-hooks-tree-") as tmp:
        root = Path(tmp)
        _layout(root, hooks, files)
        for hook, paths in runs:
            if not paths:
                continue
            if hook.mode in ("grep", "newline"):
                out[hook.id] = [f for p in paths for f in _local(hook, p, files[p])]
                continue
            assert bin_dir is not None, "tool_env() first"
            run = _fixed if hook.mode == "fix" else _reported
            out[hook.id] = run(hook, root, bin_dir, paths)
    return out
