"""The record of what `patch apply` changed in a site-packages directory, and all-or-nothing writes.

Invariant: `torch_tensorrt_ext_patches.json` in site-packages holds, for every file the series
changed there, the pristine bytes and the sha256 of the pristine and of the patched file, plus the
name and hash of every applied patch — enough to revert byte for byte and to tell applied from
stale without the series at hand. `commit_files` writes a set of files so that either all of them
change or none does: every new content is first staged beside its destination (which is where a
read-only directory fails, before anything changed), then renamed into place, and undone in
reverse if a rename fails. `around_record` orders an apply's writes so that a kill between two
renames leaves every file pristine or as the record then in place says. Staging files are named
`.<name>.<random>.tte-tmp`; one that exists while no run holds the site lock was left by a killed
run, and `sweep_staging` removes it.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence

from . import testhook
from ..errors import UsageError
from .errors import PatchError

STATE_NAME = "torch_tensorrt_ext_patches.json"
FORMAT = 1
STAGING_SUFFIX = ".tte-tmp"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class FileRecord:
    site_path: str
    pristine: bytes
    pristine_sha256: str
    patched_sha256: str


@dataclass(frozen=True)
class PatchRecord:
    name: str
    sha256: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class TargetRecord:
    distribution: str
    version: str
    patches: tuple[PatchRecord, ...] = ()
    files: dict[str, FileRecord] = field(default_factory=dict)   # repo path -> record


@dataclass(frozen=True)
class State:
    targets: dict[str, TargetRecord] = field(default_factory=dict)

    def to_json(self) -> bytes:
        doc = {"format": FORMAT, "written_by": "torch-tensorrt-ext patch apply", "targets": {
            name: {"distribution": t.distribution, "version": t.version,
                   "patches": [{"name": p.name, "sha256": p.sha256, "files": list(p.files)}
                               for p in t.patches],
                   "files": {rp: {"site_path": f.site_path, "pristine_sha256": f.pristine_sha256,
                                  "patched_sha256": f.patched_sha256,
                                  "pristine_base64": base64.b64encode(f.pristine).decode()}
                             for rp, f in sorted(t.files.items())}}
            for name, t in sorted(self.targets.items())}}
        return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def state_path(site: Path) -> Path:
    return Path(site) / STATE_NAME


def read_state(site: Path) -> State | None:
    """The recorded state, None if the series was never applied here; damaged files are errors."""
    path = state_path(site)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PatchError(f"cannot read the patch record {path}: {exc.strerror or exc}; nothing "
                         f"was changed. Run as a user who can read it (the owner of the "
                         f"environment), or make it readable (chmod a+r {path})") from None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise PatchError(f"the patch record {path} is not valid JSON ({exc}); nothing was "
                         f"changed. {_DAMAGED.format(path=path)}") from None
    try:
        if doc.get("format") != FORMAT:
            raise UsageError(f"format {doc.get('format')!r}, expected {FORMAT}")
        targets = {name: _target_record(t) for name, t in doc["targets"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PatchError(f"the patch record {path} is not one this version of torch-tensorrt-ext "
                         f"understands ({type(exc).__name__}: {exc}); nothing was changed. If "
                         f"another version wrote it, run that version's `patch revert`. "
                         f"Otherwise: {_DAMAGED.format(path=path)}") from None
    return State(targets)


# What to do with a record that cannot be parsed: its pristine copies are lost, but the manifest's
# baseline hashes still tell which installed files are pristine.
_DAMAGED = ("Move it aside (mv {path} {path}.damaged) and run `torch-tensorrt-ext patch status`: "
            "patches it lists as `not applied` sit on pristine files and `patch apply` will "
            "work; files it lists as differing from the pinned release were patched and must be "
            "restored by reinstalling their package (pip install --force-reinstall --no-deps "
            "NAME==VERSION)")


def _target_record(t: dict) -> TargetRecord:
    files = {}
    for rp, f in t["files"].items():
        pristine = base64.b64decode(f["pristine_base64"], validate=True)
        if sha256(pristine) != f["pristine_sha256"]:
            raise UsageError(f"the pristine copy of {rp} does not match its recorded hash")
        files[rp] = FileRecord(f["site_path"], pristine, f["pristine_sha256"], f["patched_sha256"])
    patches = tuple(PatchRecord(p["name"], p["sha256"], tuple(p["files"])) for p in t["patches"])
    return TargetRecord(t["distribution"], t["version"], patches, files)


def around_record(site: Path, state: State, records: dict[str, TargetRecord],
                  changes: list[tuple[Path, bytes]], new_bytes: bytes | None
                  ) -> list[tuple[Path, bytes | None]]:
    """`changes` and the new record in an order that a kill at any point leaves every file either
    pristine or as the record then in place says: first every file the old record covers goes
    back to pristine (if it changes), then the new record, then the newly patched contents."""
    old_cover = {site / f.site_path: f for r in state.targets.values() for f in r.files.values()}
    new_cover = {site / f.site_path: f for r in records.values() for f in r.files.values()}
    first: list[tuple[Path, bytes | None]] = []
    last: list[tuple[Path, bytes | None]] = []
    for path, data in changes:
        new = new_cover.get(path)
        if new is None:
            first.append((path, data))             # leaves the record: restored to pristine
            continue
        old = old_cover.get(path)
        if old is not None and path.is_file() and sha256(path.read_bytes()) == old.patched_sha256:
            first.append((path, new.pristine))     # patched before, patched differently now
        last.append((path, data))
    return first + [(state_path(site), new_bytes)] + last


def commit_files(changes: Sequence[tuple[Path, bytes | None]]) -> None:
    """Write (bytes) or delete (None) every path in order, all or nothing."""
    staged: list[tuple[Path, Path | None]] = []
    try:
        for path, data in changes:
            staged.append((path, _stage(path, data)))
        testhook.pause("after-stage")
    except OSError as exc:
        _discard(staged)
        raise PatchError(f"cannot write {path}: {exc.strerror or exc}; nothing "
                         f"was changed. Run as a user who can write to {Path(path).parent} (the "
                         f"owner of the environment), or point --site-packages at a writable "
                         f"copy") from None
    done: list[tuple[Path, bytes | None]] = []
    try:
        for path, tmp in staged:
            before = path.read_bytes() if path.exists() else None
            if tmp is None:
                if before is not None:
                    path.unlink()
            else:
                os.replace(tmp, path)
            done.append((path, before))
            if len(done) == 1:
                testhook.pause("after-first-rename")
    except OSError as exc:
        for path, before in reversed(done):
            _restore(path, before)
        _discard(staged)
        raise PatchError(f"writing {path} failed ({exc}); the files already written were "
                         f"restored, nothing is changed. Fix the cause and retry") from None


def _stage(path: Path, data: bytes | None) -> Path | None:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=STAGING_SUFFIX, dir=path.parent)
    tmp = Path(name)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data or b"")
    if data is None:
        tmp.unlink()               # a delete: the probe proved the directory is writable
        return None
    if path.exists():
        os.chmod(tmp, path.stat().st_mode & 0o7777)
    else:
        os.chmod(tmp, 0o644)
    return tmp


def sweep_staging(site: Path, site_paths: Sequence[str]) -> tuple[list[Path], list[str]]:
    """Remove the staging files a killed run left beside the record and beside `site_paths`.

    Call only while holding the site lock (then no live run has staging files). Returns the
    removed paths and, for each one that could not be removed, "path (reason)"."""
    folders = {Path(site)} | {(Path(site) / sp).parent for sp in site_paths}
    removed: list[Path] = []
    failed: list[str] = []
    for folder in sorted(folders):
        for tmp in sorted(folder.glob(f".*{STAGING_SUFFIX}")):
            try:
                tmp.unlink()
                removed.append(tmp)
            except FileNotFoundError:
                pass
            except OSError as exc:
                failed.append(f"{tmp} ({exc.strerror or exc})")
    return removed, failed


def _discard(staged: Sequence[tuple[Path, Path | None]]) -> None:
    for _, tmp in staged:
        if tmp is not None and tmp.exists():
            tmp.unlink()


def _restore(path: Path, before: bytes | None) -> None:
    if before is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(before)


def drop_bytecode(site: Path, site_paths: Sequence[str]) -> list[Path]:
    """Remove `__pycache__/<stem>.*.pyc` of every changed `.py` file; returns what was removed."""
    removed = []
    for sp in site_paths:
        source = Path(site) / sp
        if source.suffix != ".py":
            continue
        for pyc in (source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"):
            try:
                pyc.unlink()
                removed.append(pyc)
            except OSError:
                pass               # stale bytecode is still rejected by its recorded size/mtime
    return removed
