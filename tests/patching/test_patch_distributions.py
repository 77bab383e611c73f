"""A target that accepts either of two distributions shipping the same files (torch-tensorrt on GPU
runners, torch-tensorrt-rtx on CPU machines): whichever is installed is used and named, both at
once is refused, and the baseline hashes decide whether its files can be patched."""
from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from patch_fixtures import (run, A1, ALPHA, patch_name, patch_text, replace_line, sha,  # noqa: E402
                            snapshot, write_series, write_site)

from torch_tensorrt_ext.patching import bundled  # noqa: E402
from torch_tensorrt_ext.patching.errors import PatchError  # noqa: E402
from torch_tensorrt_ext.patching.manifest import load_manifest  # noqa: E402
from torch_tensorrt_ext.patching.state import read_state  # noqa: E402

FILE = "torch_tensorrt/alpha.py"
SUBJECT = "Patch alpha line ten"
NAME = patch_name(1, SUBJECT)
EITHER = {"distributions": ["torch-tensorrt", "torch-tensorrt-rtx"], "version": "2.14.0",
          "repo_prefix": "py/", "site_prefix": "", "baseline": {f"py/{FILE}": sha(ALPHA)}}


def series(root: Path, table=EITHER) -> Path:
    return write_series(root, {"torch_tensorrt": table}, {"torch_tensorrt": [(NAME, patch_text(
        SUBJECT, "Why: a fixture.\nUpstream: none.", [(f"py/{FILE}", ALPHA, A1)]))]})


@pytest.mark.parametrize("dist", ["torch-tensorrt-rtx", "torch-tensorrt"])
def test_either_distribution_is_patched_and_named(tmp_path, capsys, dist):
    site = write_site(tmp_path / "site", dist, "2.14.0", {FILE: ALPHA})
    info = f"{dist.replace('-', '_')}-2.14.0.dist-info"
    assert (site / info).is_dir()
    patches = series(tmp_path / "patches")
    pristine = snapshot(site)
    rc, out, err = run(capsys, "check", site, patches)
    assert (rc, err) == (0, "")
    rc, out, err = run(capsys, "apply", site, patches)
    assert (rc, err) == (0, "")
    assert out == (f"torch_tensorrt 2.14.0: applied {NAME}\n1 file(s) written in {site}; "
                   f"record: torch_tensorrt_ext_patches.json\n")
    assert (site / FILE).read_bytes() == A1
    assert read_state(site).targets["torch_tensorrt"].distribution == dist
    rc, out, _ = run(capsys, "status", site, patches)
    assert (rc, out) == (0, f"torch_tensorrt 2.14.0: {dist} 2.14.0 in {site}\n"
                            f"  applied      {NAME}\n")
    assert run(capsys, "revert", site, patches)[0] == 0
    assert snapshot(site) == pristine


def test_both_distributions_installed_is_refused_naming_both(tmp_path, capsys):
    site = write_site(tmp_path / "site", "torch-tensorrt", "2.14.0", {FILE: ALPHA})
    write_site(site, "torch-tensorrt-rtx", "2.14.0", {})
    patches = series(tmp_path / "patches")
    before = snapshot(site)
    both = (f"{site} has both torch-tensorrt 2.14.0 (torch_tensorrt-2.14.0.dist-info) and "
            f"torch-tensorrt-rtx 2.14.0 (torch_tensorrt_rtx-2.14.0.dist-info) installed; they "
            f"ship the same files, so uninstalling one also deletes files of the other: pip "
            f"uninstall torch-tensorrt torch-tensorrt-rtx, then install the one this machine "
            f"needs with pip install --no-deps NAME==VERSION")
    rc, out, err = run(capsys, "apply", site, patches)
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch apply: error: torch_tensorrt: {both}\n"
                   f"Nothing was changed.\n")
    rc, out, err = run(capsys, "status", site, patches)
    assert (rc, out, err) == (1, "", f"torch-tensorrt-ext patch status: error: {both}\n")
    assert snapshot(site) == before


def test_neither_installed_names_both_choices(tmp_path, monkeypatch, capsys):
    """Without this package's metadata (a checkout run from source) the pinned releases are
    named; with it, its extras (tests/patching/test_patch_site.py)."""
    def no_metadata(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(bundled.importlib.metadata, "requires", no_metadata)
    site = tmp_path / "site"
    site.mkdir()
    patches = series(tmp_path / "patches")
    rc, out, err = run(capsys, "apply", site, patches)
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch apply: error: torch-tensorrt or torch-tensorrt-rtx: "
                   f"the series has 1 patch(es) for it ({NAME}) but neither is installed in "
                   f"{site}; install one of them there, never both (pip install --no-deps "
                   f"torch-tensorrt==2.14.0, or torch-tensorrt-rtx==2.14.0) or pass "
                   f"--site-packages DIR\n"
                   f"Nothing was changed.\n")
    rc, out, _ = run(capsys, "status", site, patches)
    assert (rc, out) == (0, f"torch_tensorrt 2.14.0: torch-tensorrt or torch-tensorrt-rtx is not "
                            f"installed in {site}\n")


def test_messages_name_the_distribution_found(tmp_path, capsys):
    site = write_site(tmp_path / "site", "torch-tensorrt-rtx", "2.15.0", {FILE: ALPHA})
    patches = series(tmp_path / "patches")
    rc, _, err = run(capsys, "apply", site, patches)
    assert rc == 1
    assert err == (f"torch-tensorrt-ext patch apply: error: torch-tensorrt-rtx: the series is "
                   f"pinned to version 2.14.0 ({patches / 'upstream.toml'}) but {site} has 2.15.0 "
                   f"(torch_tensorrt_rtx-2.15.0.dist-info); install the pinned release (pip "
                   f"install --no-deps torch-tensorrt-rtx==2.14.0), or port the series to 2.15.0 "
                   f"(see `torch-tensorrt-ext patch drift`)\nNothing was changed.\n")


def test_the_baseline_hashes_decide_the_files(tmp_path, capsys):
    """An rtx build whose file differs from the pinned torch-tensorrt file is refused by hash."""
    other = replace_line(ALPHA, 2, "002 an rtx-only line")
    site = write_site(tmp_path / "site", "torch-tensorrt-rtx", "2.14.0", {FILE: other})
    patches = series(tmp_path / "patches")
    before = snapshot(site)
    rc, out, err = run(capsys, "apply", site, patches)
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch apply: error: torch-tensorrt-rtx 2.14.0: py/{FILE} "
                   f"({site / FILE}) has sha256 {sha(other)}, expected {sha(ALPHA)} (the "
                   f"pristine file of the pinned release, {patches / 'upstream.toml'}); "
                   f"something other than this patch series modified it: reinstall it (pip "
                   f"install --force-reinstall --no-deps torch-tensorrt-rtx==2.14.0) and run "
                   f"`torch-tensorrt-ext patch apply` again\nNothing was changed.\n")
    assert snapshot(site) == before


def test_a_reinstall_as_the_other_distribution_is_followed(tmp_path, capsys):
    """Applied on torch-tensorrt, then the machine switches to torch-tensorrt-rtx (pristine files
    back, the record stays): apply patches again and records the new distribution."""
    site = write_site(tmp_path / "site", "torch-tensorrt", "2.14.0", {FILE: ALPHA})
    patches = series(tmp_path / "patches")
    assert run(capsys, "apply", site, patches)[0] == 0
    for p in sorted((site / "torch_tensorrt-2.14.0.dist-info").iterdir()):
        p.unlink()
    (site / "torch_tensorrt-2.14.0.dist-info").rmdir()
    (site / FILE).unlink()
    write_site(site, "torch-tensorrt-rtx", "2.14.0", {FILE: ALPHA})
    rc, out, err = run(capsys, "apply", site, patches)
    assert (rc, err) == (0, "")
    assert out == (f"torch_tensorrt 2.14.0: applied {NAME}\n1 file(s) written in {site}; "
                   f"record: torch_tensorrt_ext_patches.json\n")
    assert read_state(site).targets["torch_tensorrt"].distribution == "torch-tensorrt-rtx"


def test_the_manifest_reads_the_list_and_the_single_name(tmp_path):
    single = dict(EITHER, distribution="torch-tensorrt")
    del single["distributions"]
    t = load_manifest(series(tmp_path / "one", single)).targets[0]
    assert (t.distributions, t.distribution) == (("torch-tensorrt",), "torch-tensorrt")
    t = load_manifest(series(tmp_path / "two")).targets[0]
    assert t.distributions == ("torch-tensorrt", "torch-tensorrt-rtx")
    assert t.distribution == "torch-tensorrt or torch-tensorrt-rtx"


@pytest.mark.parametrize("toml, message", [
    ('distribution = "torch-tensorrt"\ndistributions = ["torch-tensorrt-rtx"]',
     'give either distribution = "NAME" or distributions = ["NAME", ...], not both'),
    ("distributions = []", "distributions must be a non-empty list of pip distribution names "
                           "(got [])"),
    ('distributions = "torch-tensorrt"', "distributions must be a non-empty list of pip "
                                         "distribution names (got 'torch-tensorrt')"),
    ('distributions = ["torch-tensorrt", "Torch_TensorRT"]',
     "distributions lists 'Torch_TensorRT' twice; keep one"),
    ('version = "1"', 'distribution must be a non-empty string, or give distributions = '
                      '["NAME", ...] (got None)'),
])
def test_bad_distribution_keys_are_refused(tmp_path, toml, message):
    (tmp_path / "upstream.toml").write_text(
        f'[targets.t]\n{toml}\n' + ('version = "1"\n' if "version" not in toml else "")
        + 'repo_prefix = ""\nsite_prefix = ""\n')
    with pytest.raises(PatchError) as exc:
        load_manifest(tmp_path)
    assert str(exc.value) == f"{tmp_path / 'upstream.toml'} [targets.t]: {message}"
