"""`patches/upstream.toml`: which upstream releases the series targets, and their pristine files.

Invariant: a loaded `Manifest` is fully validated — every target has one or more accepted
distributions (`distributions = [...]`, or the older single `distribution = "..."`: pip names
that install the same files, e.g. torch-tensorrt and torch-tensorrt-rtx), a pinned version, path
prefixes that are relative and end in "/" (or are empty), and a baseline mapping upstream
*repository* paths (under `repo_prefix`) to lower-case sha256 hex digests. Mapping a
repository path to its site-packages path (strip `repo_prefix`, prepend `site_prefix`) happens
only here. A target may also pin upstream *test* files (`[targets.NAME.tests]`, same form, paths
outside `repo_prefix`): files the series' patches change the way an upstream pull request
changes its tests, never installed, whose pristine copies live in the project under `tests_root`
(a folder relative to the project root, the folder above the patches directory).
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from collections.abc import Mapping

from .dists import normalise
from .errors import PatchError

MANIFEST_NAME = "upstream.toml"
_TARGET_KEYS = {"distribution", "distributions", "version", "repo_prefix", "site_prefix",
                "baseline", "tests", "tests_root"}
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TARGET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Target:
    """One upstream release the series patches."""

    name: str                      # folder under patches/, e.g. "executorch"
    distributions: tuple[str, ...]  # accepted pip names (they install the same files)
    version: str                   # the pinned release
    repo_prefix: str               # stripped from repository paths ...
    site_prefix: str               # ... and this prepended, to find the file in site-packages
    baseline: Mapping[str, str] = field(default_factory=dict)  # repo path -> sha256 (pristine)
    manifest_path: Path = Path(MANIFEST_NAME)
    tests: Mapping[str, str] = field(default_factory=dict)  # upstream test file -> sha256
    tests_root: str = ""           # where the project keeps those files' pristine copies

    def pristine_hash(self, repo_path: str) -> str | None:
        """The pinned sha256 of `repo_path`, an installed file or an upstream test file."""
        return self.baseline.get(repo_path) or self.tests.get(repo_path)

    def test_file(self, repo_path: str) -> Path:
        """The project's pristine copy of the upstream test file `repo_path`."""
        if repo_path not in self.tests:
            raise PatchError(f"{self.name}: {repo_path} is not an upstream test file of "
                             f"[targets.{self.name}.tests] in {self.manifest_path}")
        path = self.manifest_path.resolve().parent.parent / self.tests_root / repo_path
        if not path.is_file():
            raise PatchError(f"{self.name}: the pristine copy of upstream's {repo_path} is not at "
                             f"{path}; the series changes upstream's tests, which only a "
                             "checkout of this project carries (pass --patches from one)")
        return path

    @property
    def distribution(self) -> str:
        """The accepted distribution names for messages: "a", or "a or b"."""
        return " or ".join(self.distributions)

    def pins(self) -> str:
        """pip requirement(s) of the pinned release: "a==V", or "a==V or b==V"."""
        return " or ".join(f"{d}=={self.version}" for d in self.distributions)

    def site_path(self, repo_path: str) -> str:
        """The path, relative to site-packages, of the installed copy of `repo_path`."""
        if not repo_path.startswith(self.repo_prefix):
            raise PatchError(
                f"{self.name}: {repo_path} is not under the repository prefix "
                f"{self.repo_prefix!r} of [targets.{self.name}] in {self.manifest_path}; only "
                f"files shipped in the {self.distribution} wheel can be patched in site-packages")
        return self.site_prefix + repo_path[len(self.repo_prefix):]

    def baseline_key_hint(self) -> str:
        return f"[targets.{self.name}.baseline] of {self.manifest_path}"


@dataclass(frozen=True)
class Manifest:
    """The parsed manifest; `root` is the patches directory holding it and one folder per target."""

    root: Path
    targets: tuple[Target, ...]

    def target(self, name: str) -> Target:
        for t in self.targets:
            if t.name == name:
                return t
        known = ", ".join(t.name for t in self.targets) or "none"
        raise PatchError(f"no target {name!r} in {self.root / MANIFEST_NAME} (targets: {known})")


def load_manifest(patches_dir: Path) -> Manifest:
    """Parse and validate `<patches_dir>/upstream.toml`."""
    path = Path(patches_dir) / MANIFEST_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise PatchError(f"no patch manifest at {path}; pass --patches DIR pointing at the "
                         f"folder that holds {MANIFEST_NAME} and one folder per target") from None
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PatchError(f"{path} is not valid TOML: {exc}; fix the file") from None
    unknown = set(doc) - {"targets"}
    if unknown:
        raise PatchError(f"{path}: unknown top-level key(s) {sorted(unknown)}; only [targets.*] "
                         f"tables are allowed")
    tables = doc.get("targets")
    if not isinstance(tables, dict) or not tables:
        raise PatchError(f"{path} declares no [targets.NAME] table; add one per upstream")
    return Manifest(Path(patches_dir), tuple(_target(path, n, t) for n, t in tables.items()))


def _target(path: Path, name: str, table: object) -> Target:
    where = f"{path} [targets.{name}]"
    if not _TARGET_NAME.fullmatch(name):
        raise PatchError(f"{where}: target names must be folder names (letters, digits, _ . -)")
    if not isinstance(table, dict):
        raise PatchError(f"{where} must be a table")
    unknown = set(table) - _TARGET_KEYS
    if unknown:
        raise PatchError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: "
                         f"{sorted(_TARGET_KEYS)}")
    distributions = _distributions(where, table)
    values = {}
    for key in ("version", "repo_prefix", "site_prefix"):
        value = table.get(key)
        if not isinstance(value, str):
            raise PatchError(f"{where}: {key} must be a string (got {value!r})")
        values[key] = value
    if not values["version"]:
        raise PatchError(f"{where}: version must not be empty")
    for key in ("repo_prefix", "site_prefix"):
        prefix = values[key]
        if prefix and (not prefix.endswith("/") or not _relative(prefix.rstrip("/"))):
            raise PatchError(f"{where}: {key} {prefix!r} must be empty or a relative folder path "
                             f"ending in '/'")
    baseline = _hashes(where, "baseline", table)
    for repo_path in baseline:
        if not repo_path.startswith(values["repo_prefix"]):
            raise PatchError(f"{where}.baseline: {repo_path} is not under repo_prefix "
                             f"{values['repo_prefix']!r}")
    tests = _hashes(where, "tests", table)
    tests_root = table.get("tests_root", "")
    if tests and (not isinstance(tests_root, str) or not _relative(tests_root)):
        raise PatchError(f"{where}: tests_root must name the folder (relative to the project "
                         f"root) holding the pristine copies of [targets.{name}.tests]")
    both = sorted(set(tests) & set(baseline))
    if both or (values["repo_prefix"] and any(p.startswith(values["repo_prefix"]) for p in tests)):
        raise PatchError(f"{where}.tests: {(both or sorted(tests))[0]} is an installed file; "
                         "list it under baseline")
    return Target(name=name, distributions=distributions, baseline=baseline,
                  manifest_path=path, tests=tests, tests_root=tests_root, **values)


def _hashes(where: str, key: str, table: dict) -> dict[str, str]:
    """A `"repo/path" = "<sha256>"` table of the target (empty when absent)."""
    hashes = table.get(key, {})
    if not isinstance(hashes, dict):
        raise PatchError(f"{where}: {key} must be a table of \"repo/path\" = \"<sha256>\"")
    for repo_path, digest in hashes.items():
        if not _relative(repo_path):
            raise PatchError(f"{where}.{key}: {repo_path!r} must be a relative repository path")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise PatchError(f"{where}.{key}: the hash of {repo_path} must be 64 lower-case "
                             f"hex digits (sha256 of the pristine file), got {digest!r}")
    return dict(hashes)


def _distributions(where: str, table: dict) -> tuple[str, ...]:
    """`distributions = ["a", "b"]`, or the single-name form `distribution = "a"` (not both)."""
    if "distribution" in table and "distributions" in table:
        raise PatchError(f"{where}: give either distribution = \"NAME\" or distributions = "
                         f"[\"NAME\", ...], not both")
    if "distributions" in table:
        names = table["distributions"]
        if not isinstance(names, list) or not names or not all(
                isinstance(n, str) and n for n in names):
            raise PatchError(f"{where}: distributions must be a non-empty list of pip "
                             f"distribution names (got {names!r})")
    else:
        name = table.get("distribution")
        if not isinstance(name, str) or not name:
            raise PatchError(f"{where}: distribution must be a non-empty string, or give "
                             f"distributions = [\"NAME\", ...] (got {name!r})")
        names = [name]
    seen = set()
    for n in names:
        if normalise(n) in seen:
            raise PatchError(f"{where}: distributions lists {n!r} twice; keep one")
        seen.add(normalise(n))
    return tuple(names)


def _relative(p: str) -> bool:
    pure = PurePosixPath(p)
    return bool(p) and not pure.is_absolute() and ".." not in pure.parts and "\\" not in p


def hash_hint(repo_path: str, digest: str) -> str:
    """The manifest line that would pin `repo_path` to `digest`."""
    return f'"{repo_path}" = "{digest}"'
