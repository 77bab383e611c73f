"""The contributor flow on upstream git checkouts: import (git am), export (git format-patch),
drift.

Invariant: `import` only ever adds a new branch whose commits are the series (recording the
branch point in the branch's git config), `export` only writes the target's patch folder — and
writes exactly what `git format-patch` of the branch's commits says, normalised so that an export of
an unchanged import reproduces the patch files byte for byte — an import whose merged Python files
gain a problem the upstream files did not have (a syntax error, an undefined name, an unused
import: `tree_check`) is reported as a conflict naming file, line and name — and `drift` reads
blobs and never changes the checkout, its index or its refs. `export` also reports what
upstream's own hooks (hooks.toml) find on the branch that they do not find at the branch point
(`upstream_lint`), changing nothing for it.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .. import gitapply
from ..errors import PatchError
from ..gitapply import git
from ..manifest import Manifest, hash_hint
from ..series import ORDER_FILE, Series, parse_patch
from ..state import sha256
from .exportfmt import FORMAT_PATCH_ARGS, normalise_patch
from .tree_check import NOT_CHECKED, tree_problems
from .upstream_hooks import load_hooks, tool_env
from .upstream_lint import lint_series

DEFAULT_BRANCH = "tte-patches"


def _toplevel(repo: Path) -> Path:
    proc = git(["rev-parse", "--show-toplevel"], Path(repo), check=False)
    if proc.returncode != 0:
        raise PatchError(f"{repo} is not a git checkout (git rev-parse failed); pass --repo with "
                         f"a clone of the upstream repository")
    return Path(proc.stdout.decode().strip())


def _out(top: Path, *args: str) -> str:
    return git(list(args), top).stdout.decode().strip()


def _in_progress(top: Path) -> str | None:
    for name, what in (("rebase-apply", "git am or rebase"), ("rebase-merge", "git rebase"),
                       ("CHERRY_PICK_HEAD", "git cherry-pick"), ("MERGE_HEAD", "git merge")):
        if Path(top, _out(top, "rev-parse", "--git-path", name)).exists():
            return what
    return None


def _require_ready(top: Path, action: str) -> None:
    busy = _in_progress(top)
    if busy:
        raise PatchError(f"a {busy} is in progress in {top}; finish it (--continue) or abort it "
                         f"(--abort) before `patch {action}`")
    dirty = _out(top, "status", "--porcelain", "--untracked-files=no")
    if dirty:
        first = dirty.splitlines()[0]
        raise PatchError(f"{top} has uncommitted changes ({first.strip()} ...); commit them "
                         f"(into the right patch: git commit --fixup / rebase -i) or stash them "
                         f"before `patch {action}`")


def _committer_env(top: Path) -> dict[str, str]:
    env = dict(os.environ)
    if git(["config", "user.email"], top, check=False).returncode != 0:
        env.setdefault("GIT_COMMITTER_NAME", "torch-tensorrt-ext")
        env.setdefault("GIT_COMMITTER_EMAIL", "torch-tensorrt-ext@localhost")
    return env


def import_series(repo: Path, series: Series, *, branch: str = DEFAULT_BRANCH,
                  three_way: bool = False, release: str | None = None) -> list[str]:
    """Commit the series onto the checkout's HEAD on a new branch, one commit per patch."""
    top = _toplevel(repo)
    _require_ready(top, "import")
    if git(["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], top,
           check=False).returncode == 0:
        raise PatchError(f"branch {branch} already exists in {top}; delete it (git branch -D "
                         f"{branch}) or pass --branch NAME")
    head = _out(top, "rev-parse", "--verify", "HEAD^{commit}")
    env = _committer_env(top)
    files = [str(p.path) for p in series.patches]
    am = ["am", "--keep-non-patch", "--keep-cr", "--whitespace=nowarn", "--no-3way"]
    if three_way and files:
        tip = _am_on_release(top, series, release, am + files, env)
        git(["checkout", "-q", "-b", branch, head], top)
        _record_branch(top, branch, head, series)
        proc = git(["cherry-pick", f"{tip}~{len(files)}..{tip}"], top, env=env, check=False)
        step = "cherry-pick"
    else:
        git(["checkout", "-q", "-b", branch, head], top)
        _record_branch(top, branch, head, series)
        proc = git(am + files, top, env=env, check=False) if files else None
        step = "am"
    if proc is not None and proc.returncode != 0:
        done = int(_out(top, "rev-list", "--count", f"{head}..HEAD"))
        stuck = series.patches[done]
        raise PatchError(
            f"import stopped at patch {stuck.label} ({done + 1} of {len(files)}) on {branch} in "
            f"{top}: {_tail(proc)}\nResolve the conflict in the checkout, `git add` the files, "
            f"`git {step} --continue`, then `torch-tensorrt-ext patch export --repo {top} "
            f"--target {series.target.name}`; or `git {step} --abort` to give up"
            + ("" if three_way else " (or retry with --3way)"))
    problems = tree_problems(top, list(series.files + series.test_files), base=head)
    notes = [p for p in problems if p.startswith(NOT_CHECKED)]
    broken = [p for p in problems if not p.startswith(NOT_CHECKED)]
    if broken:
        raise PatchError(
            f"import of {series.target.name} merged onto {head[:12]} as branch {branch} in "
            f"{top}, but the merged files do not check — a conflict git did not see: "
            + "; ".join(broken) + f". Fix them on {branch} (commit), then `torch-tensorrt-ext "
            f"patch export --repo {top} --target {series.target.name}`")
    return [f"imported {len(files)} patch(es) of {series.target.name} onto {head[:12]} as "
            f"branch {branch} in {top}; edit, commit, then `torch-tensorrt-ext patch export "
            f"--repo {top} --target {series.target.name}`", *notes]


def _record_branch(top: Path, branch: str, base: str, series: Series) -> None:
    git(["config", f"branch.{branch}.tteBase", base], top)
    git(["config", f"branch.{branch}.tteTarget", series.target.name], top)


def _am_on_release(top: Path, series: Series, release: str | None, am: list[str],
                   env: dict[str, str]) -> str:
    """Apply the series with git am onto the pinned release (detached); returns the tip commit.

    The commits then reach HEAD by cherry-pick, i.e. by git's three-way merge with the release
    as merge base, which needs no `index` lines in the patch files."""
    t = series.target
    candidates = [release] if release else [f"v{t.version}", t.version]
    for rev in candidates:
        if git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], top,
               check=False).returncode == 0:
            break
    else:
        raise PatchError(f"--3way merges against the pinned release {t.distribution} "
                         f"{t.version}, but {top} has no {' or '.join(candidates)}; fetch the "
                         f"tag (git fetch origin tag v{t.version}) or pass --release REV")
    for rp in series.files:   # the released files identify the release; its tests are not in it
        blob = git(["cat-file", "blob", f"{rev}:{rp}"], top, check=False)
        if blob.returncode != 0 or sha256(blob.stdout) != t.baseline[rp]:
            raise PatchError(f"{rev} in {top} is not the pinned release {t.version}: {rp} "
                             f"there does not match its baseline hash in {t.manifest_path}; "
                             f"pass --release REV naming the {t.version} release commit")
    orig = _out(top, "rev-parse", "--verify", "HEAD")
    git(["checkout", "-q", "--detach", rev], top)
    proc = git(am, top, env=env, check=False)
    tip = _out(top, "rev-parse", "HEAD")
    if proc.returncode != 0:
        git(["am", "--abort"], top, check=False)
        git(["checkout", "-q", orig], top)
        raise PatchError(f"the series does not apply to the pinned release {rev} in {top}: "
                         f"{_tail(proc)}; run `torch-tensorrt-ext patch check` and fix the series")
    return tip


def _tail(proc) -> str:
    text = (proc.stdout + proc.stderr).decode("utf-8", "replace").strip().splitlines()
    keep = [ln for ln in text if ln.startswith(("error:", "CONFLICT", "Patch failed"))]
    return "; ".join(keep or text[-3:])


def export_series(repo: Path, manifest: Manifest, target_name: str,
                  base: str | None = None) -> list[str]:
    """Regenerate `<patches>/<target>/*.patch` and its order file from the branch's commits."""
    target = manifest.target(target_name)
    top = _toplevel(repo)
    _require_ready(top, "export")
    proc = git(["symbolic-ref", "--quiet", "--short", "HEAD"], top, check=False)
    if proc.returncode != 0:
        raise PatchError(f"HEAD is detached in {top}; check out the branch made by `patch "
                         f"import` (e.g. {DEFAULT_BRANCH}) before exporting")
    branch = proc.stdout.decode().strip()
    recorded = git(["config", f"branch.{branch}.tteTarget"], top, check=False)
    if recorded.returncode == 0 and recorded.stdout.decode().strip() != target.name:
        raise PatchError(f"branch {branch} in {top} holds the "
                         f"{recorded.stdout.decode().strip()} series, not {target.name}")
    if base is None:
        found = git(["config", f"branch.{branch}.tteBase"], top, check=False)
        if found.returncode != 0:
            raise PatchError(f"branch {branch} in {top} was not made by `patch import`; pass "
                             f"--base REV (the upstream commit the patches sit on)")
        base = found.stdout.decode().strip()
    base = _out(top, "rev-parse", "--verify", f"{base}^{{commit}}")
    if git(["merge-base", "--is-ancestor", base, "HEAD"], top, check=False).returncode != 0:
        raise PatchError(f"{base[:12]} is not an ancestor of {branch} in {top}; pass --base REV")
    if _out(top, "rev-list", "--merges", f"{base}..HEAD"):
        raise PatchError(f"{branch} has merge commits after {base[:12]}; a series is linear: "
                         f"rebase it (git rebase {base[:12]})")
    patches = _format_patches(top, base, target, manifest)
    return (_write_folder(manifest.root / target.name, patches)
            + _hook_lines(top, base, manifest, target, patches))


def _hook_lines(top: Path, base: str, manifest: Manifest, target,
                patches: list[tuple[str, bytes]]) -> list[str]:
    """Upstream's hooks (hooks.toml) on the files the exported commits touch, at `base` vs
    HEAD: what the series introduces is listed, to fix before a pull request."""
    hooks = load_hooks(manifest.root).get(target.name)
    if hooks is None or not patches:
        return []
    parsed = [parse_patch(Path(manifest.root, target.name, n), d) for n, d in patches]
    files = list(dict.fromkeys(rp for p in parsed for rp in (*p.files, *p.test_files)))
    trees = {}
    for rev in (base, "HEAD"):
        blobs = {rp: git(["cat-file", "blob", f"{rev}:{rp}"], top, check=False) for rp in files}
        trees[rev] = {rp: b.stdout for rp, b in blobs.items() if b.returncode == 0}
    try:
        bin_dir = tool_env(hooks, files)
    except PatchError as exc:
        return [f"upstream's hooks not run: {exc}"]
    by = {rp: [p.name[:4] for p in parsed if rp in (*p.files, *p.test_files)] for rp in files}
    report = lint_series(hooks, trees[base], trees["HEAD"], bin_dir, by)
    verdict = (f"{len(report.introduced)} finding(s) introduced by the series: fix them on the "
               "branch (git commit --fixup, git rebase --autosquash) and export again"
               if report.introduced else "nothing introduced by the series")
    return [f"upstream's hooks on the {len(files)} file(s) the series touches, "
            f"{base[:12]} vs HEAD: {verdict}", *report.lines]


def _format_patches(top: Path, base: str, target, manifest: Manifest) -> list[tuple[str, bytes]]:
    commits = _out(top, "rev-list", "--reverse", f"{base}..HEAD").split()
    out: list[tuple[str, bytes]] = []
    with tempfile.TemporaryDirectory(prefix="tte-export-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
        git([*FORMAT_PATCH_ARGS, "-o", tmp, f"{base}..HEAD"], top, env=env,
            what="git format-patch")
        names = sorted(os.listdir(tmp))
        for commit, name in zip(commits, names, strict=False):
            data = normalise_patch(Path(tmp, name).read_bytes())
            where = Path(manifest.root, target.name, name)
            subject = _out(top, "log", "-1", "--format=%s", commit)
            try:
                patch = parse_patch(where, data)
            except PatchError as exc:
                raise PatchError(f"commit {commit[:12]} ({subject!r}) cannot be exported: "
                                 f"{exc}; reword it (git rebase -i {base[:12]}) and export "
                                 "again") from None
            for rp in patch.files:
                if target.pristine_hash(rp) is None:
                    blob = git(["cat-file", "blob", f"{base}:{rp}"], top, check=False)
                    hint = (f"; at {base[:12]} it is {hash_hint(rp, sha256(blob.stdout))} — if "
                            f"that commit is the pinned release, add that line"
                            if blob.returncode == 0 else "")
                    raise PatchError(f"commit {commit[:12]} ({subject!r}) modifies {rp}, which "
                                     f"is not in {target.baseline_key_hint()} (nor, an upstream "
                                     f"test file, in [targets.{target.name}.tests]){hint}")
            out.append((name, data))
    return out


def _write_folder(folder: Path, patches: list[tuple[str, bytes]]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    old = {p.name: p.read_bytes() for p in folder.glob("*.patch")}
    new = dict(patches)
    lines = []
    for name, data in patches:
        verdict = "unchanged" if old.get(name) == data else ("changed" if name in old else "new")
        if verdict != "unchanged":
            (folder / name).write_bytes(data)
        lines.append(f"  {verdict:<10} {name}")
    for name in sorted(set(old) - set(new)):
        (folder / name).unlink()
        lines.append(f"  {'removed':<10} {name}")
    (folder / ORDER_FILE).write_text("".join(f"{name}\n" for name, _ in patches))
    return [f"exported {len(patches)} patch(es) to {folder} (order file {ORDER_FILE} "
            f"rewritten)"] + lines


def _absence(top: Path, commit: str, rp: str) -> str:
    """Why `rp` is not in `commit`, as far as the checkout's history tells."""
    removed = _out(top, "log", "-1", "--diff-filter=D", "--format=%h %cs %s", commit, "--", rp)
    if removed:
        return f"not present upstream at {commit[:12]}: removed by {removed}"
    added = _out(top, "log", "--all", "--diff-filter=A", "--format=%H", "--", rp).split()
    if added and git(["merge-base", "--is-ancestor", added[-1], commit], top,
                     check=False).returncode != 0:
        first = _out(top, "log", "-1", "--format=%h %cs %s", added[-1])
        return f"not present upstream at {commit[:12]}: added after this tree, by {first}"
    return (f"not present upstream at {commit[:12]} (added after this tree or removed; its "
            "history here does not say which)")


def drift(repo: Path, series: Series, rev: str = "HEAD") -> tuple[list[str], bool]:
    """How each patch fares on `rev` of a checkout, read from git objects; True when none
    conflicts."""
    top = _toplevel(repo)
    commit = _out(top, "rev-parse", "--verify", f"{rev}^{{commit}}")
    described = _out(top, "log", "-1", "--format=%cs %s", commit)
    files: dict[str, bytes] = {}
    missing = []
    for rp in series.files + series.test_files:
        blob = git(["cat-file", "blob", f"{commit}:{rp}"], top, check=False)
        if blob.returncode == 0:
            files[rp] = blob.stdout
        else:
            missing.append(rp)
    _, results = gitapply.apply_series(files, series.patches, fuzz=True, keep_going=True,
                                       detect_upstream=True, which="all")
    t = series.target
    lines = [f"drift of {t.name} ({len(series.patches)} patch(es), pinned {t.distribution} "
             f"{t.version}) against {top} at {commit[:12]} ({described})"]
    for r in results:
        lines.append(f"  {r.outcome.value:<20} {r.patch.name}")
        gone = [rp for rp in r.patch.files + r.patch.test_files if rp in missing]
        lines += [f"      {rp}: {_absence(top, commit, rp)}" for rp in gone]
        lines += [f"      {n}" for n in r.notes]
    counts = {o: sum(r.outcome is o for r in results) for o in gitapply.Outcome}
    lines.append("summary: " + ", ".join(f"{n} {o.value}" for o, n in counts.items()))
    return lines, counts[gitapply.Outcome.CONFLICT] == 0
