"""A patch carries its upstream pull request's test changes: sections on upstream's test files
(pinned under `[targets.NAME.tests]`, pristine copies under `tests_root`) that apply wherever the
whole patch applies — the contributor flow's release checkout and `git am` — and never in
site-packages, where only the installed files' sections apply."""
from __future__ import annotations

from pathlib import Path

import pytest

from patch_fixtures import (git, numbered, patch_text, replace_line, sha, snapshot,  # noqa: E402
                            write_series, write_site)

from torch_tensorrt_ext.patching import cli  # noqa: E402
from torch_tensorrt_ext.patching.contributor.flow import import_series  # noqa: E402
from torch_tensorrt_ext.patching.errors import PatchError  # noqa: E402
from torch_tensorrt_ext.patching.gitapply import apply_series  # noqa: E402
from torch_tensorrt_ext.patching.manifest import load_manifest  # noqa: E402
from torch_tensorrt_ext.patching.contributor.release_repo import release_checkout  # noqa: E402
from torch_tensorrt_ext.patching.series import load_series  # noqa: E402

CORE = numbered("core")
NEW = replace_line(CORE, 12, "012 core patched")
# an upstream test whose changed line reads "- " when removed: a "-- " line inside the hunk,
# which is not the format-patch signature
TEST = numbered("test").replace(b"020 test value 20\n", b"- \n")
TEST_NEW = TEST.replace(b"- \n", b"020 asserts the new behaviour\n")
WHY = "Why: a seam.\nUpstream: pytorch/example#1."
TARGET = {"distribution": "demo", "version": "3.0", "repo_prefix": "lib/",
          "site_prefix": "demo/", "baseline": {"lib/core.py": sha(CORE)},
          "tests_root": "vendored", "tests": {"tests/test_core.py": sha(TEST)}}


def project(tmp_path, diffs, target=TARGET) -> Path:
    """A project folder: patches/ holding the series, vendored/ the pristine upstream test."""
    (tmp_path / "vendored/tests").mkdir(parents=True)
    (tmp_path / "vendored/tests/test_core.py").write_bytes(TEST)
    return write_series(tmp_path / "patches", {"demo": target},
                        {"demo": [("0001-x.patch", patch_text("Patch core", WHY, diffs))]})


@pytest.fixture
def site(tmp_path):
    return write_site(tmp_path / "site", "demo", "3.0", {"demo/core.py": CORE})


BOTH = [("lib/core.py", CORE, NEW), ("tests/test_core.py", TEST, TEST_NEW)]


def test_the_series_tells_installed_files_from_upstream_tests(tmp_path):
    patches = project(tmp_path, BOTH)
    series = load_series(load_manifest(patches), "demo")
    (patch,) = series.patches
    assert (patch.files, patch.test_files) == (("lib/core.py",), ("tests/test_core.py",))
    assert (series.files, series.test_files) == (("lib/core.py",), ("tests/test_core.py",))
    # each view applies to its own files alone, as git applies it
    site_view, results = apply_series({"lib/core.py": CORE}, series.patches)
    assert [r.outcome.value for r in results] == ["clean"]
    assert site_view == {"lib/core.py": NEW}
    tests_view, results = apply_series({"tests/test_core.py": TEST}, series.patches,
                                       which="tests")
    assert [r.outcome.value for r in results] == ["clean"]
    assert tests_view == {"tests/test_core.py": TEST_NEW}
    assert b"test_core" not in patch.sections("site")
    assert b"lib/core.py" not in patch.sections("tests")
    assert patch.sections("all") == patch.data


def test_apply_patches_site_packages_and_never_touches_upstream_tests(tmp_path, site, capsys):
    patches = project(tmp_path, BOTH)
    before = snapshot(site)
    rc = cli.main(["patch", "apply", "--site-packages", str(site), "--patches", str(patches)])
    assert rc == 0, capsys.readouterr().err
    after = snapshot(site)
    assert after["demo/core.py"] == NEW
    assert not [p for p in after if "test_core" in p]            # no test file appears
    assert {p for p in after if p not in before} == {"torch_tensorrt_ext_patches.json"}
    assert (tmp_path / "vendored/tests/test_core.py").read_bytes() == TEST


def test_a_test_file_the_target_does_not_pin_is_refused(tmp_path, site, capsys):
    patches = project(tmp_path, [("lib/core.py", CORE, NEW),
                                 ("tests/test_other.py", TEST, TEST_NEW)])
    before = snapshot(site)
    rc = cli.main(["patch", "apply", "--site-packages", str(site), "--patches", str(patches)])
    assert (rc, snapshot(site) == before) == (1, True)
    assert capsys.readouterr().err == (
        f"torch-tensorrt-ext patch apply: error: patch demo/0001-x.patch modifies "
        f"tests/test_other.py, which is not in [targets.demo.baseline] of "
        f"{patches / 'upstream.toml'}; add its pristine sha256 for demo 3.0 there (an upstream "
        f"test file under [targets.demo.tests]), or drop the hunk\n")


def test_an_installed_file_listed_as_a_test_is_refused(tmp_path):
    target = {**TARGET, "tests": {"lib/core.py": sha(CORE)}}
    patches = project(tmp_path, BOTH, target)
    with pytest.raises(PatchError, match=r"\.tests: lib/core.py is an installed file; list it "
                                         r"under baseline"):
        load_manifest(patches)


def test_the_release_checkout_carries_the_tests_and_git_am_applies_whole(tmp_path, site):
    patches = project(tmp_path, BOTH)
    manifest = load_manifest(patches)
    repo = release_checkout(site, manifest, "demo", tmp_path / "repo")
    assert (repo / "tests/test_core.py").read_bytes() == TEST
    import_series(repo, load_series(manifest, "demo"))
    assert git(repo, "diff", "--name-only", "HEAD~1", "HEAD").splitlines() == [
        "lib/core.py", "tests/test_core.py"]
    assert (repo / "lib/core.py").read_bytes() == NEW
    assert (repo / "tests/test_core.py").read_bytes() == TEST_NEW


def test_a_vendored_test_that_is_not_the_pinned_one_is_refused(tmp_path, site):
    patches = project(tmp_path, BOTH)
    (tmp_path / "vendored/tests/test_core.py").write_bytes(TEST + b"# edited\n")
    with pytest.raises(PatchError, match=r"the project's copy of upstream's tests/test_core.py "
                                         r"\(.*vendored/tests/test_core.py\) is not the pinned "
                                         r"release's"):
        release_checkout(site, load_manifest(patches), "demo", tmp_path / "repo")
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())
