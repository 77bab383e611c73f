"""The patch tooling on real upstream files: the project's own series, and the pinned wheels.

Never writes to the project's .venv: the real series is only `check`ed there (read-only), and the
apply/revert round trip runs on files extracted from the torch-tensorrt 2.14.0 wheel, or copied from
an installed torch-tensorrt or torch-tensorrt-rtx 2.14.0 (its .py files are the same bytes).
"""
from __future__ import annotations

import glob
import hashlib
import os
import re
import sysconfig
import zipfile
from pathlib import Path

import pytest

from patch_fixtures import patch_text, sha, snapshot, write_series  # noqa: E402

from helpers import REPO
from torch_tensorrt_ext import cli as tte_cli  # noqa: E402
from torch_tensorrt_ext.patching import cli  # noqa: E402
from torch_tensorrt_ext.patching.dists import find_distribution  # noqa: E402
from torch_tensorrt_ext.patching.manifest import load_manifest  # noqa: E402
from torch_tensorrt_ext.patching.series import load_series  # noqa: E402
from torch_tensorrt_ext.patching.state import STATE_NAME, read_state  # noqa: E402

PATCHES = REPO / "patches"
SITE = Path(sysconfig.get_paths()["purelib"])
COMPILE = "torch_tensorrt/_compile.py"
INFO = "torch_tensorrt-2.14.0.dist-info"
EITHER = ("torch-tensorrt", "torch-tensorrt-rtx")


def test_the_project_series_is_well_formed():
    manifest = load_manifest(PATCHES)
    assert [(t.name, t.distributions, t.version, t.repo_prefix, t.site_prefix)
            for t in manifest.targets] == [
        ("executorch", ("executorch",), "1.5.1", "", "executorch/"),
        ("torch_tensorrt", EITHER, "2.14.0", "py/", "")]
    for t in manifest.targets:
        series = load_series(manifest, t.name)
        for patch in series.patches:
            assert "upstream" in patch.body.lower(), (
                f"{patch.label}: the body must say how the change goes upstream (PR/issue) or "
                f"why it cannot")
            # each reads as a pull request: the gap, then these sections
            starts = [line.split(":")[0] for line in patch.body.splitlines()
                      if line.startswith(("Behaviour", "Tests:", "Upstreamable"))]
            assert [s for s in ("Behaviour", "Tests", "Upstreamable") if s not in
                    {x.split()[0] for x in starts}] == [], (patch.label, starts)
            # the tests a message names exist: this project's, or upstream's it changes
            named = set(re.findall(r"tests/[\w/]+\.py", patch.body))
            assert [t for t in sorted(named) if not (REPO / t).is_file()
                    and t not in patch.test_files] == [], patch.label
            # and each upstream test file the patch changes is named
            assert [t for t in patch.test_files if Path(t).name not in patch.body] == [], \
                patch.label


def test_the_project_series_checks_against_the_installed_packages_without_writing(capsys):
    dist = find_distribution(SITE, "executorch")
    if dist is None or dist.version != "1.5.1":
        pytest.skip(f"executorch 1.5.1 is not installed in {SITE}")
    manifest = load_manifest(PATCHES)
    watched = [SITE / STATE_NAME] + [SITE / t.site_path(rp) for t in manifest.targets
                                     for rp in t.baseline]
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) if p.exists() else None for p in watched}
    rc = tte_cli.main(["patch", "check", "--site-packages", str(SITE), "--patches", str(PATCHES)])
    out, err = capsys.readouterr()
    # another test's `patch` run on this site may hold its lock (pytest runs on two workers):
    # the notice of waiting for it is the one line allowed
    said = [line for line in err.splitlines()
            if not line.startswith("torch-tensorrt-ext patch check: waiting up to ")]
    assert (rc, said) == (0, [])
    series = (PATCHES / "torch_tensorrt" / ".patches").read_text().split()
    assert len(series) >= 4  # the torch_tensorrt series is real, not empty
    lines = out.splitlines()
    at = lines.index("torch_tensorrt 2.14.0: " + next(
        line.split(": ", 1)[1] for line in lines if line.startswith("torch_tensorrt 2.14.0: ")))
    listed = lines[at + 1:at + 1 + len(series)]
    assert [line.split() for line in listed] == [["clean", name] for name in series]
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) if p.exists() else None
            for p in watched} == before


def _torch_tensorrt_files():
    """(dist-info name, METADATA, RECORD, _compile.py) of the pinned release: from the
    torch-tensorrt wheel file when one is on disk, else from the installed torch-tensorrt or
    torch-tensorrt-rtx (or the pristine copy `patch apply` recorded of it) when its RECORD proves
    it pristine."""
    wheels = [os.environ.get("TTE_TORCH_TENSORRT_WHEEL", "")] + glob.glob(
        "/tmp/ttw/torch_tensorrt-2.14.0-*.whl")
    for wheel in filter(os.path.isfile, wheels):
        with zipfile.ZipFile(wheel) as zf:
            return (INFO, *(zf.read(n) for n in (f"{INFO}/METADATA", f"{INFO}/RECORD", COMPILE)))
    for name in EITHER:
        dist = find_distribution(SITE, name)
        if dist is None or dist.version != "2.14.0" or not (SITE / COMPILE).is_file():
            continue
        state = read_state(SITE)
        recorded = state.targets.get("torch_tensorrt") if state else None
        copy = recorded.files.get(f"py/{COMPILE}") if recorded else None
        for data in [(SITE / COMPILE).read_bytes()] + ([copy.pristine] if copy else []):
            if hashlib.sha256(data).hexdigest() == dist.record.get(COMPILE):
                return (dist.dist_info.name, (dist.dist_info / "METADATA").read_bytes(),
                        (dist.dist_info / "RECORD").read_bytes(), data)
    pytest.skip("no torch-tensorrt 2.14.0 wheel (set TTE_TORCH_TENSORRT_WHEEL) and no pristine "
                "installed torch-tensorrt or torch-tensorrt-rtx 2.14.0")


def test_apply_check_revert_on_the_real_torch_tensorrt_wheel(tmp_path, capsys):
    info, metadata, record, compile_py = _torch_tensorrt_files()
    site = tmp_path / "site"
    (site / info).mkdir(parents=True)
    (site / info / "METADATA").write_bytes(metadata)
    (site / info / "RECORD").write_bytes(record)
    (site / "torch_tensorrt").mkdir()
    (site / COMPILE).write_bytes(compile_py)
    lines = compile_py.decode().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if ln.startswith("def save("))
    patched = "".join(lines[:at] + ["# torch-tensorrt-ext: the save() seam goes here\n"]
                      + lines[at:]).encode()
    patches = write_series(tmp_path / "patches", {"torch_tensorrt": {
        "distributions": list(EITHER), "version": "2.14.0", "repo_prefix": "py/",
        "site_prefix": "", "baseline": {f"py/{COMPILE}": sha(compile_py)}}},
        {"torch_tensorrt": [("0001-Mark-the-save-seam.patch", patch_text(
            "Mark the save seam", "Why: a fixture. Upstream: never.",
            [(f"py/{COMPILE}", compile_py, patched)]))]})
    pristine = snapshot(site)
    args = ["--site-packages", str(site), "--patches", str(patches)]

    assert cli.main(["patch", "apply", *args]) == 0
    assert (site / COMPILE).read_bytes() == patched
    assert cli.main(["patch", "check", *args]) == 0     # RECORD agrees with the baseline
    assert cli.main(["patch", "status", *args]) == 0
    out = capsys.readouterr().out
    assert "torch_tensorrt 2.14.0: 1 patch(es) apply to the pinned baseline (1 file(s), from the " \
           "recorded pristine copies)" in out
    assert out.endswith("  applied      0001-Mark-the-save-seam.patch\n")
    assert cli.main(["patch", "revert", "--site-packages", str(site)]) == 0
    assert snapshot(site) == pristine


def _release_repo_or_skip(tmp_path, target: str) -> Path:
    from torch_tensorrt_ext.patching.contributor.release_repo import release_checkout
    dist = find_distribution(SITE, "executorch")
    if dist is None or dist.version != "1.5.1":
        pytest.skip(f"the pinned releases are not installed in {SITE}")
    return release_checkout(SITE, load_manifest(PATCHES), target, tmp_path / target)


def _git(repo: Path, *args: str, check: bool = True):
    import subprocess
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_AUTHOR_NAME="u",
               GIT_AUTHOR_EMAIL="u@invalid", GIT_COMMITTER_NAME="u",
               GIT_COMMITTER_EMAIL="u@invalid")
    proc = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert not check or proc.returncode == 0, proc.stderr
    return proc


def _move_and_edit_upstream(repo: Path, patch) -> str:
    """An upstream commit over the release: 7 lines inserted at the top of every file the series
    touches, and in `patch`'s first hunk its first context line edited (two lines from the
    patch's change, so a three-way merge takes both, but the patch no longer applies as is)."""
    for f in sorted(p for p in repo.rglob("*.py") if ".git" not in p.parts):
        f.write_text("".join(f"# upstream moved this file down ({k})\n" for k in range(7))
                     + f.read_text())
    text = patch.path.read_text()
    first = next(ln for ln in text.splitlines() if ln.startswith("+++ b/"))[6:]
    at = text.index("@@ -", text.index(f"+++ b/{first}"))
    start = int(text[at + 4:].split(",")[0])
    body = text[text.index("\n", at) + 1:].splitlines()
    assert body[0].startswith(" ") and not body[1].startswith(("+", "-")), body[:3]
    lines = (repo / first).read_text().splitlines(keepends=True)
    row = start - 1 + 7
    assert lines[row].rstrip("\n") == body[0][1:]
    lines[row] = lines[row].rstrip("\n") + "  # edited upstream\n"
    (repo / first).write_text("".join(lines))
    _git(repo, "commit", "-qam", "upstream moves and edits the patched regions")
    return first


@pytest.mark.parametrize("target", ["torch_tensorrt", "executorch"])
def test_the_series_rebases_with_git_am_3way_over_a_moved_and_edited_upstream(tmp_path, target):
    """The exported patches carry the pinned release's blob ids (`index` lines), so
    `git am -3` — a contributor's rebase — merges three-way where the patch no longer applies as
    is; without the index lines git cannot build the ancestor and stops."""
    series = load_series(load_manifest(PATCHES), target)
    files = [str(p.path) for p in series.patches]
    assert all("\nindex " in p.path.read_text() for p in series.patches)
    repo = _release_repo_or_skip(tmp_path, target)
    edited = _move_and_edit_upstream(repo, series.patches[0])
    upstream = _git(repo, "rev-parse", "HEAD").stdout.strip()

    plain = _git(repo, "am", "--no-3way", files[0], check=False)
    assert plain.returncode != 0, "the edit must stop a plain apply, or 3-way is not tested"
    _git(repo, "am", "--abort")

    stripped = tmp_path / "stripped"
    stripped.mkdir()
    for f in files:
        text = Path(f).read_text()
        (stripped / Path(f).name).write_text(
            "\n".join(ln for ln in text.split("\n") if not ln.startswith("index ")))
    blind = _git(repo, "am", "-3", str(stripped / Path(files[0]).name), check=False)
    assert blind.returncode != 0 and "lacking or useless" in blind.stdout + blind.stderr
    _git(repo, "am", "--abort")

    merged = _git(repo, "am", "-3", *files, check=False)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert int(_git(repo, "rev-list", "--count", f"{upstream}..HEAD").stdout) == len(files)
    result = (repo / edited).read_text()
    assert "  # edited upstream\n" in result and result.startswith("# upstream moved")
    added = [ln[1:] for ln in series.patches[0].path.read_text().splitlines()
             if ln.startswith("+") and not ln.startswith("+++")]
    assert any(a.strip() and a in result for a in added)


@pytest.mark.parametrize("target", ["torch_tensorrt", "executorch"])
def test_the_series_imports_onto_its_release_and_the_merged_files_check(tmp_path, target):
    """What `patch import` checks after merging (compile, undefined names, unused imports that
    the release files do not have) holds for the project's own series on its pinned release:
    it imports with nothing to report."""
    from torch_tensorrt_ext.patching.contributor.flow import import_series
    manifest = load_manifest(PATCHES)
    repo = _release_repo_or_skip(tmp_path, target)
    lines = import_series(repo, load_series(manifest, target))
    assert len(lines) == 1 and lines[0].startswith(
        f"imported {len(load_series(manifest, target).patches)} patch(es) of {target}")
