"""A git checkout of a target's pinned release, as far as the series touches it, made from the
patch record of a site-packages where the series is applied (its pristine copies) or from the
installed files where it is not — what a contributor's upstream checkout holds at the release tag
for those files, blob for blob.

Invariant: `release_checkout(site, manifest, target, path)` creates a new repository at `path`
whose one commit holds, at each repository path the target's baseline lists, the exact bytes of
the pinned release (checked against the manifest's baseline sha256), and at each upstream test
file it pins (`[targets.NAME.tests]`) the project's pristine copy, checked alike; it changes
nothing in `site`, and refuses (PatchError, naming the file) a file that is missing or not the
release's.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import PatchError
from ..gitapply import git, isolated_env
from ..manifest import Manifest
from ..state import read_state, sha256

__all__ = ["release_checkout", "release_files"]


def release_files(site: Path, manifest: Manifest, target_name: str) -> dict[str, bytes]:
    """Repository path -> the pinned release's bytes, for every file of the target's baseline
    and every upstream test file it pins."""
    target = manifest.target(target_name)
    state = read_state(Path(site))
    record = state.targets.get(target_name) if state is not None else None
    out = {}
    for rp, want in sorted(target.baseline.items()):
        if record is not None and rp in record.files:
            data = record.files[rp].pristine
        else:
            path = Path(site) / target.site_path(rp)
            if not path.is_file():
                raise PatchError(f"{path} (release file {rp} of {target_name}) is missing")
            data = path.read_bytes()
        if sha256(data) != want:
            raise PatchError(f"{rp} of {target_name} in {site} is not the pinned release's "
                             f"(sha256 {sha256(data)}, the manifest pins {want})")
        out[rp] = data
    for rp, want in sorted(target.tests.items()):
        data = target.test_file(rp).read_bytes()
        if sha256(data) != want:
            raise PatchError(f"the project's copy of upstream's {rp} ({target.test_file(rp)}) is "
                             f"not the pinned release's (sha256 {sha256(data)}, the manifest pins "
                             f"{want})")
        out[rp] = data
    return out


def release_checkout(site: Path, manifest: Manifest, target_name: str, path: Path) -> Path:
    files = release_files(site, manifest, target_name)
    path = Path(path)
    path.mkdir(parents=True)
    env = {**isolated_env(path), **_IDENTITY}
    git(["init", "-q", "-b", "release"], path, env=env)
    for rp, data in files.items():
        (path / rp).parent.mkdir(parents=True, exist_ok=True)
        (path / rp).write_bytes(data)
    git(["add", "--", *files], path, env=env)
    git(["commit", "-q", "-m", f"{target_name} {manifest.target(target_name).version} "
         "(release files the series touches)"], path, env=env)
    return path


_IDENTITY = {"GIT_AUTHOR_NAME": "release", "GIT_AUTHOR_EMAIL": "release@invalid",
             "GIT_COMMITTER_NAME": "release", "GIT_COMMITTER_EMAIL": "release@invalid",
             "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
             "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
