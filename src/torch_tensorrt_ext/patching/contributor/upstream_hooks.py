"""`patches/hooks.toml`: upstream's own formatters and linters, as upstream's configs pin them,
and the environment their tools are installed in.

Invariant: a loaded `HookSet` is fully validated — every hook has an id, a known mode, compiling
`files` / `exclude` / `pattern` regexes, and (modes that run a tool) an argv and the pinned
`package==version` of its tool; the config files it writes are plain text. `tool_env(hooks)`
returns the hook environment's bin folder only after every tool a hook needs for `files` is
installed there at exactly its pinned version, else raises `PatchError` saying how to install
them (scripts/setup.sh, or the pyproject dependency group `hooks.env`). Nothing here runs a tool.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..dists import normalise
from ..errors import PatchError

HOOKS_NAME = "hooks.toml"
ENV_DIR_VAR = "TTE_HOOKS_DIR"        # where the hook environments live (default below)
MODES = ("fix", "report", "grep", "newline", "unpinned")
_TOOL_MODES = ("fix", "report")


@dataclass(frozen=True)
class Hook:
    """One of upstream's hooks."""

    id: str
    mode: str
    files: re.Pattern[str]
    exclude: re.Pattern[str] | None = None
    argv: tuple[str, ...] = ()
    package: str = ""
    version: str = ""
    pattern: re.Pattern[str] | None = None

    def applies(self, path: str) -> bool:
        return bool(self.files.search(path)) and not (self.exclude and self.exclude.search(path))

    @property
    def label(self) -> str:
        return f"{self.id} {self.version}".rstrip()


@dataclass(frozen=True)
class HookSet:
    """A target's hooks, the files they need at the tree's root, and their environment."""

    target: str
    env: str                              # the pyproject dependency group, and the env's name
    hooks: tuple[Hook, ...]
    config: dict[str, str]                # file name at the tree's root -> its text
    root_dirs: tuple[str, ...] = ()       # upstream's root folders (isort: first-party)
    package_roots: tuple[str, ...] = ()   # every folder below is a package upstream
    not_run: tuple[str, ...] = ()         # "hook: why it never sees a file of the series"
    source: Path = Path(HOOKS_NAME)


def load_hooks(patches_dir: Path) -> dict[str, HookSet]:
    """Every target's hooks; none where the series has no hooks.toml."""
    path = Path(patches_dir) / HOOKS_NAME
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PatchError(f"{path} cannot be read: {exc}; fix the file") from None
    return {name: _hookset(path, name, t) for name, t in data.get("targets", {}).items()}


def _hookset(path: Path, name: str, t: dict) -> HookSet:
    where = f"[targets.{name}] of {path}"
    if not isinstance(t.get("env"), str):
        raise PatchError(f"{where} names no `env` (the pyproject dependency group holding its "
                         f"tools)")
    config = t.get("config", {})
    if not all(isinstance(v, str) for v in config.values()):
        raise PatchError(f"{where}: every [config] entry must be the file's text")
    hooks = tuple(_hook(f"{where}, hook {i + 1}", h) for i, h in enumerate(t.get("hooks", [])))
    return HookSet(name, t["env"], hooks, dict(config), tuple(t.get("root_dirs", ())),
                   tuple(t.get("package_roots", ())), tuple(t.get("not_run", ())), path)


def _regex(where: str, h: dict, key: str) -> re.Pattern[str] | None:
    if key not in h:
        return None
    try:
        return re.compile(h[key])
    except (re.error, TypeError) as exc:
        raise PatchError(f"{where}: `{key}` is not a regular expression ({exc})") from None


def _hook(where: str, h: dict) -> Hook:
    mode = h.get("mode")
    if not h.get("id") or mode not in MODES:
        raise PatchError(f"{where} needs an `id` and a `mode` (one of {', '.join(MODES)})")
    files = _regex(where, h, "files")
    if files is None:
        raise PatchError(f"{where} ({h['id']}) needs `files`, a regex on repository paths")
    if mode in _TOOL_MODES and not (h.get("argv") and h.get("package") and h.get("version")):
        raise PatchError(f"{where} ({h['id']}) runs a tool: give `argv`, `package`, `version`")
    if mode == "grep" and "pattern" not in h:
        raise PatchError(f"{where} ({h['id']}) is a grep hook: give its `pattern`")
    return Hook(h["id"], mode, files, _regex(where, h, "exclude"), tuple(h.get("argv", ())),
                h.get("package", ""), str(h.get("version", "")), _regex(where, h, "pattern"))


def env_dir(hooks: HookSet) -> Path:
    """Where scripts/setup.sh installs the target's tools: $TTE_HOOKS_DIR/<env>, by default
    `<this interpreter's prefix>/tte-hooks/<env>`."""
    base = os.environ.get(ENV_DIR_VAR) or str(Path(sys.prefix) / "tte-hooks")
    return Path(base) / hooks.env


def tool_env(hooks: HookSet, files: Sequence[str]) -> Path:
    """The bin folder holding every tool the hooks run on `files`, each at its pinned version."""
    needed = {(h.package, h.version) for h in hooks.hooks
              if h.mode in _TOOL_MODES and any(h.applies(f) for f in files)}
    root = env_dir(hooks)
    sites = sorted(root.glob("lib/python*/site-packages"))
    found = {normalise(d.metadata["Name"]): d.version
             for d in importlib.metadata.distributions(path=[str(s) for s in sites])}
    wrong = [f"{pkg}=={want} (found {found.get(normalise(pkg), 'none')})"
             for pkg, want in sorted(needed) if found.get(normalise(pkg)) != want]
    if wrong:
        raise PatchError(
            f"upstream's hooks for {hooks.target} need {', '.join(wrong)} in {root}; run "
            f"scripts/setup.sh (it installs the pyproject dependency group {hooks.env} there), "
            f"or make that environment yourself (python -m venv {root}, then pip-install with its "
            f"python the pins of the dependency group {hooks.env} in pyproject.toml); "
            f"${ENV_DIR_VAR} names another folder of such environments")
    return root / "bin"
