"""apply / revert / status / check of the series on one site-packages directory.

Invariant: site-packages is only written by `apply` and `revert`, and only after every check has
passed for every target (installed version == pinned version, each file either the pristine
release file by sha256 or exactly what the last apply left, the whole series applied by git in a
temporary tree); then all files and the state record change together or not at all. `apply` of an
already applied, unchanged series writes nothing. `check` and `status` never write patch state.
A kill at any point leaves every file pristine or as the record then in place says (files go
back to pristine under the old record, then the new record, then the new contents; revert
restores the files before deleting the record), so running the same command again finishes.
Each command holds the site lock (`lock`) from before it reads the record until after its last
write, and first removes the staging files a killed run left, saying so (`session`). A target
accepts any one of its distributions; messages name the one installed, and the baseline hashes
decide the files.
"""
from __future__ import annotations

import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from . import bundled, gitapply
from .dists import Distribution, find_one_of
from .errors import PatchError
from .lock import LockOptions
from .manifest import Target, load_manifest
from .series import Series, load_series
from .session import session
from .state import (FileRecord, PatchRecord, State, TargetRecord, around_record, commit_files,
                    drop_bytecode, read_state, sha256, state_path)

NOTHING_CHANGED = "Nothing was changed."



DEFAULT_LOCK = LockOptions()   # wait as the environment says, tell nobody

def default_site_packages() -> Path:
    """The site-packages directory of the running interpreter."""
    return Path(sysconfig.get_paths()["purelib"])


@dataclass(frozen=True)
class _File:
    repo_path: str
    site_path: str
    current: bytes | None
    record: FileRecord | None
    baseline: str                       # pristine sha256

    @property
    def state(self) -> str:
        """'patched' (as the last apply left it), 'pristine', 'missing' or 'changed'."""
        if self.current is None:
            return "missing"
        digest = sha256(self.current)
        if self.record is not None and digest == self.record.patched_sha256:
            return "patched"
        return "pristine" if digest == self.baseline else "changed"

    def pristine(self) -> bytes | None:
        if self.record is not None and self.record.pristine_sha256 == self.baseline:
            return self.record.pristine
        return self.current if self.state == "pristine" else None


def _all_series(patches_dir: Path) -> list[Series]:
    manifest = load_manifest(patches_dir)
    return [load_series(manifest, t.name) for t in manifest.targets]


def _files(site: Path, target: Target, repo_paths, record: TargetRecord | None) -> list[_File]:
    out = []
    for rp in repo_paths:
        rec = record.files.get(rp) if record else None
        sp = rec.site_path if rec else target.site_path(rp)
        path = site / sp
        current = path.read_bytes() if path.is_file() else None
        out.append(_File(rp, sp, current, rec, target.baseline.get(rp) or rec.pristine_sha256))
    return out


def _none_of(t: Target) -> str:
    if len(t.distributions) == 1:
        return f"no {t.distribution} dist-info"
    return "neither" if len(t.distributions) == 2 else "none of them"


def _how_to_install(t: Target) -> str:
    """The pip command that installs a missing target: this package's extras where they name its
    distributions ('torch-tensorrt-ext[rtx]'), else the pinned release itself."""
    if len(t.distributions) == 1:
        return f"install {t.pins()} there (pip install --no-deps {t.pins()})"
    extras = bundled.extras_installing(t.distributions)
    if extras:
        which = " or ".join(f"'{bundled.DISTRIBUTION}[{e}]' ({d})" for d, e in extras.items())
        return f"install one of them there, never both (pip install {which})"
    return (f"install one of them there, never both (pip install --no-deps "
            f"{', or '.join(f'{d}=={t.version}' for d in t.distributions)})")


def _distribution(site: Path, series: Series, errors: list[str]) -> Distribution | None:
    """The installed distribution of a target that has patches; version mismatches are errors."""
    t = series.target
    try:
        dist = find_one_of(site, t.distributions)
    except PatchError as exc:
        errors.append(f"{t.name}: {exc}")
        return None
    names = ", ".join(p.name for p in series.patches)
    if dist is None:
        errors.append(f"{t.distribution}: the series has {len(series.patches)} patch(es) for it "
                      f"({names}) but {_none_of(t)} is installed in {site}; {_how_to_install(t)} "
                      f"or pass --site-packages DIR")
    elif dist.version != t.version:
        errors.append(f"{dist.name}: the series is pinned to version {t.version} "
                      f"({t.manifest_path}) but {site} has {dist.version} "
                      f"({dist.dist_info.name}); install the pinned release (pip install "
                      f"--no-deps {dist.name}=={t.version}), or port the series to "
                      f"{dist.version} (see `torch-tensorrt-ext patch drift`)")
        return None
    return dist


def _unusable(t: Target, f: _File, site: Path, dist: str) -> str:
    """Why `f` cannot be patched; `dist` is the distribution installed (or recorded)."""
    where = f"{f.repo_path} ({site / f.site_path})"
    reinstall = (f"reinstall it (pip install --force-reinstall --no-deps "
                 f"{dist}=={t.version}) and run `torch-tensorrt-ext patch apply` again")
    if f.current is None:
        return f"{dist} {t.version}: {where} does not exist; {reinstall}"
    found = sha256(f.current)
    if f.record is not None:
        return (f"{dist} {t.version}: {where} changed since `patch apply` (sha256 "
                f"{found}; apply left {f.record.patched_sha256}, the pristine file is "
                f"{f.baseline}); if the edit is unwanted, {reinstall}")
    return (f"{dist} {t.version}: {where} has sha256 {found}, expected {f.baseline} "
            f"(the pristine file of the pinned release, {t.manifest_path}); something other than "
            f"this patch series modified it: {reinstall}")


def _pristine_tree(site: Path, series: Series, record: TargetRecord | None, dist: str,
                   errors: list[str], *, writing: bool) -> dict[str, bytes] | None:
    """The pristine bytes of every file the series touches; when `writing`, every installed file
    must also be either pristine or exactly as the last apply left it."""
    tree: dict[str, bytes] = {}
    for f in _files(site, series.target, series.files, record):
        data = f.pristine()
        if data is None or (writing and f.state in ("changed", "missing")):
            errors.append(_unusable(series.target, f, site, dist))
        else:
            tree[f.repo_path] = data
    return tree if len(tree) == len(series.files) else None


def _apply_in_temp(series: Series, tree: dict[str, bytes], dist: str, errors: list[str]
                   ) -> tuple[dict[str, bytes], list[gitapply.Result]] | None:
    patched, results = gitapply.apply_series(tree, series.patches)
    failed = [r for r in results if not r.applied]
    if failed:
        r = failed[0]
        errors.append(f"patch {r.patch.label} does not apply to the pristine "
                      f"{dist} {series.target.version} files "
                      f"({', '.join(r.patch.files)}): {'; '.join(r.notes)}; fix the patch on a "
                      f"checkout (patch import / edit / patch export)")
        return None
    return patched, results


def apply(site: Path, patches_dir: Path, lock: LockOptions = DEFAULT_LOCK) -> list[str]:
    """Apply the whole series to `site`, or change nothing and raise PatchError."""
    site = Path(site)
    all_series = _all_series(patches_dir)
    with session(site, "apply", lock, all_series, writes=True) as swept:
        return swept + _apply(site, all_series)


@dataclass
class _Writes:
    """What one `apply` will write: files (path, bytes), their site paths, and errors so far."""

    changes: list[tuple[Path, bytes]] = field(default_factory=list)
    touched: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def want(self, path: Path, data: bytes, site_path: str) -> None:
        if not path.is_file() or path.read_bytes() != data:
            self.changes.append((path, data))
            self.touched.append(site_path)


def _apply(site: Path, all_series: list[Series]) -> list[str]:
    state = read_state(site) or State()
    out = _Writes()
    lines: list[str] = []
    records: dict[str, TargetRecord] = {}
    for series in all_series:
        line = _apply_series(site, series, state.targets.get(series.target.name), out, records)
        if line is not None:
            lines.append(line)
    _restore_dropped_targets(site, state, {s.target.name for s in all_series}, out)
    if out.errors:
        raise PatchError("\n".join(out.errors) + f"\n{NOTHING_CHANGED}")
    new_state = State(records)
    old_bytes = state_path(site).read_bytes() if state_path(site).is_file() else None
    new_bytes = new_state.to_json() if records else None
    if not out.changes and old_bytes == new_bytes:
        if not records:
            return lines + [f"nothing to apply in {site}"]
        return [f"the patch series is already applied in {site}; nothing to do"]
    commit_files(around_record(site, state, records, out.changes, new_bytes))
    drop_bytecode(site, out.touched)
    return lines + [f"{len(out.changes)} file(s) written in {site}; record: "
                    f"{state_path(site).name}"]


def _apply_series(site: Path, series: Series, old: TargetRecord | None, out: _Writes,
                  records: dict[str, TargetRecord]) -> str | None:
    """Add one target's patched files (and the restoration of files an earlier series patched
    and this one does not) to `out`, its record to `records`; the line to print, or None when
    it failed (the reason is in `out.errors`)."""
    t = series.target
    if not series.patches and old is None:
        return f"{t.name} {t.version}: no patches"
    dist = _distribution(site, series, out.errors) if series.patches else None
    if series.patches and dist is None:
        return None
    dist_name = dist.name if dist else old.distribution
    tree = _pristine_tree(site, series, old, dist_name, out.errors, writing=True)
    if tree is None:
        return None
    applied = _apply_in_temp(series, tree, dist_name, out.errors)
    if applied is None:
        return None
    patched, results = applied
    desired = dict(patched)
    leftovers = [f for f in _files(site, t, old.files, old) if f.repo_path not in desired] \
        if old else []
    for f in leftovers:            # patched by an earlier series, not by this one
        if f.state == "patched":
            desired[f.repo_path] = f.record.pristine
        elif f.state == "changed":
            out.errors.append(_unusable(t, f, site, dist_name))
    sites = {f.repo_path: f.site_path for f in _files(site, t, series.files, old) + leftovers}
    for rp, data in desired.items():
        out.want(site / sites[rp], data, sites[rp])
    if series.patches:
        records[t.name] = TargetRecord(
            dist_name, t.version,
            tuple(PatchRecord(p.name, p.sha256, p.files) for p in series.patches),
            {rp: FileRecord(sites[rp], tree[rp], sha256(tree[rp]), sha256(patched[rp]))
             for rp in series.files})
    return _applied_line(series, results)


def _restore_dropped_targets(site: Path, state: State, known: set, out: _Writes) -> None:
    """A target dropped from upstream.toml: its patched files go back to pristine."""
    for name, old in sorted(state.targets.items()):
        if name in known:
            continue
        for rp, f in sorted(old.files.items()):
            path = site / f.site_path
            digest = sha256(path.read_bytes()) if path.is_file() else None
            if digest == f.patched_sha256:
                out.changes.append((path, f.pristine))
                out.touched.append(f.site_path)
            elif digest is not None and digest != f.pristine_sha256:
                out.errors.append(
                    f"{old.distribution} {old.version}: {rp} ({path}) changed since "
                    f"`patch apply`, and its target {name} is no longer in the series; "
                    f"reinstall it (pip install --force-reinstall --no-deps "
                    f"{old.distribution}=={old.version}) and apply again")


def _applied_line(series: Series, results: list[gitapply.Result]) -> str:
    t = series.target
    names = ", ".join(p.name for p in series.patches) or "no patches"
    line = f"{t.name} {t.version}: applied {names}"
    offsets = [n for r in results for n in r.notes]
    return line + (f" (note: {'; '.join(offsets)})" if offsets else "")


def revert(site: Path, force: bool = False, lock: LockOptions = DEFAULT_LOCK,
           patches_dir: Path | None = None) -> list[str]:
    """Restore every file the last apply changed; refuse files changed since unless `force`.

    `patches_dir`, when its manifest loads, only widens the search for leftover staging files."""
    site = Path(site)
    try:
        all_series = _all_series(patches_dir) if patches_dir is not None else []
    except PatchError:
        all_series = []
    with session(site, "revert", lock, all_series, writes=True) as swept:
        return swept + _revert(site, force)


def _revert(site: Path, force: bool) -> list[str]:
    state = read_state(site)
    if state is None:
        return [f"no patches are recorded in {site}; nothing to revert"]
    changes: list[tuple[Path, bytes | None]] = []
    errors: list[str] = []
    for _name, rec in sorted(state.targets.items()):
        for rp, f in sorted(rec.files.items()):
            path = site / f.site_path
            current = path.read_bytes() if path.is_file() else None
            digest = sha256(current) if current is not None else None
            if digest == f.pristine_sha256:
                continue
            if digest != f.patched_sha256 and not force:
                errors.append(f"{rec.distribution} {rec.version}: {rp} ({path}) changed since "
                              f"`patch apply` (sha256 {digest}, apply left {f.patched_sha256}); "
                              f"reverting would discard that change. Reinstall it (pip install "
                              f"--force-reinstall --no-deps {rec.distribution}=={rec.version}) "
                              f"and revert again, or `patch revert --force` to restore the "
                              f"recorded pristine copy anyway")
                continue
            changes.append((path, f.pristine))
    if errors:
        raise PatchError("\n".join(errors) + f"\n{NOTHING_CHANGED}")
    commit_files(changes + [(state_path(site), None)])
    drop_bytecode(site, [str(p.relative_to(site)) for p, _ in changes])
    return [f"restored {len(changes)} file(s) in {site} to the pristine release"]


def status(site: Path, patches_dir: Path, lock: LockOptions = DEFAULT_LOCK) -> list[str]:
    """One line per patch: applied / not applied / stale, with the reason."""
    site = Path(site)
    all_series = _all_series(patches_dir)
    with session(site, "status", lock, all_series, writes=False) as swept:
        return swept + _status(site, all_series)


def _status(site: Path, all_series: list[Series]) -> list[str]:
    state = read_state(site) or State()
    lines: list[str] = []
    for series in all_series:
        t = series.target
        rec = state.targets.get(t.name)
        if not series.patches:
            extra = " (files patched by an earlier series remain; run `patch apply`)" \
                if rec and rec.files else ""
            lines.append(f"{t.name} {t.version}: no patches{extra}")
            continue
        dist = find_one_of(site, t.distributions)
        if dist is None:
            lines.append(f"{t.name} {t.version}: {t.distribution} is not installed in {site}")
            continue
        lines.append(f"{t.name} {t.version}: {dist.name} {dist.version} in {site}")
        files = {f.repo_path: f for f in _files(site, t, series.files, rec)}
        recorded = {p.name: p for p in rec.patches} if rec else {}
        for p in series.patches:
            lines.append(f"  {_patch_status(p, files, recorded.get(p.name))}")
    return lines


def _patch_status(patch, files: dict[str, _File], rec: PatchRecord | None) -> str:
    states = {rp: files[rp].state for rp in patch.files}
    changed = [rp for rp, s in states.items() if s in ("changed", "missing")]
    if changed:
        how = "changed since apply" if rec else "differs from the pinned release"
        return f"stale        {patch.name}: {', '.join(changed)} {how}"
    if all(s == "pristine" for s in states.values()):
        return f"not applied  {patch.name}"
    if rec is None:
        return (f"not applied  {patch.name}: the series changed since apply; run "
                f"`torch-tensorrt-ext patch apply`")
    if rec.sha256 != patch.sha256:
        return (f"stale        {patch.name}: the patch file changed since apply; run "
                f"`torch-tensorrt-ext patch apply`")
    if all(s == "patched" for s in states.values()):
        return f"applied      {patch.name}"
    return f"stale        {patch.name}: only partly applied; run `torch-tensorrt-ext patch apply`"


def check(site: Path, patches_dir: Path, lock: LockOptions = DEFAULT_LOCK) -> list[str]:
    """Prove the series applies to the pinned pristine files, in temporary copies only."""
    site = Path(site)
    all_series = _all_series(patches_dir)
    with session(site, "check", lock, all_series, writes=False) as swept:
        return swept + _check(site, all_series) + _upstream_hooks(site, patches_dir, all_series)


def _upstream_hooks(site: Path, patches_dir: Path, all_series: list[Series]) -> list[str]:
    """Upstream's own formatters and linters (patches/hooks.toml) on the files the series
    touches: a finding the series introduces fails the check; upstream's own are counted. That
    is contributor tooling (`contributor/`), imported here only: apply/revert/status never load
    it."""
    from .contributor.upstream_hooks import load_hooks
    from .contributor.upstream_lint import lint_release
    hooks = load_hooks(patches_dir)
    manifest = load_manifest(patches_dir)
    lines: list[str] = []
    introduced = []
    for series in all_series:
        if series.target.name not in hooks or not series.patches:
            continue
        report = lint_release(site, manifest, series, hooks[series.target.name])
        lines.append(f"{series.target.name} {series.target.version}: upstream's hooks on the "
                     f"{len(series.files) + len(series.test_files)} file(s) the series touches "
                     f"({hooks[series.target.name].source.name})")
        lines += report.lines
        introduced += [f"{series.target.name}: {f}" for f in report.introduced]
    if introduced:
        raise PatchError("\n".join(lines) + f"\n{len(introduced)} finding(s) of upstream's hooks "
                         "introduced by the series (listed above): make those hunks what "
                         "upstream's tools want (patch import, fix, git commit --fixup, git "
                         "rebase --autosquash, patch export)")
    return lines


def _check(site: Path, all_series: list[Series]) -> list[str]:
    state = read_state(site) or State()
    errors: list[str] = []
    lines: list[str] = []
    for series in all_series:
        t = series.target
        if not series.patches:
            lines.append(f"{t.name} {t.version}: no patches")
            continue
        dist = _distribution(site, series, errors)
        if dist is None:
            continue
        _check_record(t, dist, errors)
        rec = state.targets.get(t.name)
        tree = _pristine_tree(site, series, rec, dist.name, errors, writing=False)
        applied = _apply_in_temp(series, tree, dist.name, errors) if tree is not None else None
        if applied is None:
            continue
        source = "recorded pristine copies" if rec else "installed files"
        lines.append(f"{t.name} {t.version}: {len(series.patches)} patch(es) apply to the pinned "
                     f"baseline ({len(tree)} file(s), from the {source})")
        for r in applied[1]:
            note = f": {'; '.join(r.notes)}" if r.notes else ""
            lines.append(f"  {r.outcome.value:<20} {r.patch.name}{note}")
    if errors:
        raise PatchError("\n".join(errors))
    return lines


def _check_record(t: Target, dist: Distribution, errors: list[str]) -> None:
    """The manifest's baseline hashes must agree with the wheel's own RECORD where it lists them."""
    for rp, digest in t.baseline.items():
        recorded = dist.record.get(t.site_path(rp))
        if recorded is not None and recorded != digest:
            errors.append(f"{t.manifest_path}: the baseline of {rp} says {digest}, but the RECORD "
                          f"of {dist.name} {dist.version} ({dist.dist_info}) says "
                          f"{recorded}; fix the hash in [targets.{t.name}.baseline]")
