"""A broken series (patch file, order file, manifest) is refused with a precise error, and nothing
in site-packages changes."""
from __future__ import annotations


import pytest

from patch_fixtures import (numbered, patch_text, replace_line, sha, snapshot,  # noqa: E402
                            write_series, write_site)

from torch_tensorrt_ext.patching import cli  # noqa: E402
from torch_tensorrt_ext.patching.series import parse_patch  # noqa: E402

CORE = numbered("core")
NEW = replace_line(CORE, 12, "012 core patched")
WHY = "Why: a seam.\nUpstream: pytorch/example#1."
GOOD = patch_text("Patch core", WHY, [("lib/core.py", CORE, NEW)])
TARGET = {"distribution": "demo", "version": "3.0", "repo_prefix": "lib/",
          "site_prefix": "demo/", "baseline": {"lib/core.py": sha(CORE)}}


@pytest.fixture
def site(tmp_path):
    return write_site(tmp_path / "site", "demo", "3.0", {"demo/core.py": CORE})


def apply(capsys, site, patches):
    before = snapshot(site)
    rc = cli.main(["patch", "apply", "--site-packages", str(site), "--patches", str(patches)])
    out, err = capsys.readouterr()
    assert snapshot(site) == before, "a refused apply must change nothing"
    assert (rc, out) == (1, "")
    return err


def test_a_corrupt_hunk_names_the_patch_and_the_file(tmp_path, site, capsys):
    bad = GOOD.replace(b"@@ -9,7 +9,7 @@", b"@@ -9,8 +9,7 @@")
    patches = write_series(tmp_path / "p", {"demo": TARGET}, {"demo": [("0001-x.patch", bad)]})
    assert apply(capsys, site, patches) == (
        "torch-tensorrt-ext patch apply: error: patch demo/0001-x.patch: lib/core.py: the hunk at "
        "line 13 is corrupt (its header's line counts do not match its lines); regenerate the "
        "patch with `torch-tensorrt-ext patch export`\n")


def test_a_patch_without_a_reason_is_refused(tmp_path, site, capsys):
    bare = patch_text("Patch core", "", [("lib/core.py", CORE, NEW)]).replace(b"\n\n\n---",
                                                                            b"\n\n---")
    patches = write_series(tmp_path / "p", {"demo": TARGET}, {"demo": [("0001-x.patch", bare)]})
    assert apply(capsys, site, patches) == (
        "torch-tensorrt-ext patch apply: error: patch demo/0001-x.patch: the message body is "
        "empty; say why the patch exists (to be upstreamed, with the upstream PR/issue, or why it "
        "cannot be)\n")


def test_a_patch_without_headers_is_refused(tmp_path, site, capsys):
    patches = write_series(tmp_path / "p", {"demo": TARGET},
                           {"demo": [("0001-x.patch", b"--- a/lib/core.py\n+++ b/lib/core.py\n")]})
    assert apply(capsys, site, patches) == (
        "torch-tensorrt-ext patch apply: error: patch demo/0001-x.patch: line 1 must be 'From <40 "
        "hex digits> Mon Sep 17 00:00:00 2001' (git format-patch --zero-commit); found "
        "'--- a/lib/core.py'\n")


def test_an_order_file_naming_a_missing_patch(tmp_path, site, capsys):
    patches = write_series(tmp_path / "p", {"demo": TARGET}, {"demo": [("0001-x.patch", GOOD)]})
    (patches / "demo/.patches").write_text("0001-x.patch\n0002-gone.patch\n")
    assert apply(capsys, site, patches) == (
        f"torch-tensorrt-ext patch apply: error: {patches / 'demo/.patches'} names "
        f"0002-gone.patch, but {patches / 'demo/0002-gone.patch'} does not exist; restore the "
        f"patch file or remove the line\n")


def test_a_patch_file_missing_from_the_order_file(tmp_path, site, capsys):
    patches = write_series(tmp_path / "p", {"demo": TARGET}, {"demo": [("0001-x.patch", GOOD)]})
    (patches / "demo/0002-forgotten.patch").write_bytes(GOOD)
    assert apply(capsys, site, patches) == (
        f"torch-tensorrt-ext patch apply: error: demo: 0002-forgotten.patch in {patches / 'demo'} "
        f"not listed in {patches / 'demo/.patches'}; add it to the order file or delete it\n")


def test_a_patch_touching_a_file_outside_the_baseline(tmp_path, site, capsys):
    other = numbered("other")
    two = patch_text("Patch core and other", WHY, [
        ("lib/core.py", CORE, NEW), ("lib/other.py", other, replace_line(other, 3, "003 x"))])
    patches = write_series(tmp_path / "p", {"demo": TARGET}, {"demo": [("0001-x.patch", two)]})
    assert apply(capsys, site, patches) == (
        f"torch-tensorrt-ext patch apply: error: patch demo/0001-x.patch modifies lib/other.py, "
        f"which is not in [targets.demo.baseline] of {patches / 'upstream.toml'}; add its pristine "
        f"sha256 for demo 3.0 there (an upstream test file under [targets.demo.tests]), or drop "
            f"the hunk\n")


def test_a_new_file_is_not_a_drop_in_patch(tmp_path, site, capsys):
    creating = GOOD.replace(b"--- a/lib/core.py", b"new file mode 100644\n--- a/lib/core.py")
    patches = write_series(tmp_path / "p", {"demo": TARGET}, {"demo": [("0001-x.patch", creating)]})
    assert apply(capsys, site, patches) == (
        "torch-tensorrt-ext patch apply: error: patch demo/0001-x.patch: lib/core.py: 'new file "
        "mode 100644' — only modifications of existing text files are supported (no new, "
        "deleted, renamed, binary or mode-changed files)\n")


def test_a_bad_baseline_hash_in_the_manifest(tmp_path, site, capsys):
    target = dict(TARGET, baseline={"lib/core.py": "abc"})
    patches = write_series(tmp_path / "p", {"demo": target}, {"demo": [("0001-x.patch", GOOD)]})
    assert apply(capsys, site, patches) == (
        f"torch-tensorrt-ext patch apply: error: {patches / 'upstream.toml'} [targets.demo]."
        f"baseline: the hash of lib/core.py must be 64 lower-case hex digits (sha256 of the "
        f"pristine file), got 'abc'\n")


def test_a_manifest_baseline_that_contradicts_the_wheel_record(tmp_path, site, capsys):
    wrong = replace_line(CORE, 1, "001 not the release")
    target = dict(TARGET, baseline={"lib/core.py": sha(wrong)})
    patches = write_series(tmp_path / "p", {"demo": target}, {"demo": [("0001-x.patch", GOOD)]})
    rc = cli.main(["patch", "check", "--site-packages", str(site), "--patches", str(patches)])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.splitlines()[0] == (
        f"torch-tensorrt-ext patch check: error: {patches / 'upstream.toml'}: the baseline of "
        f"lib/core.py says {sha(wrong)}, but the RECORD of demo 3.0 "
        f"({site / 'demo-3.0.dist-info'}) says {sha(CORE)}; fix the hash in "
        f"[targets.demo.baseline]")


def test_parse_reads_subject_author_body_and_files_and_accepts_a_diffstat(tmp_path):
    with_stat = GOOD.replace(b"---\ndiff", b"---\n lib/core.py | 2 +-\n 1 file changed\n\ndiff")
    patch = parse_patch(tmp_path / "demo" / "0001-x.patch", with_stat)
    assert (patch.subject, patch.author, patch.body, patch.files) == (
        "Patch core", "Patch Author <author@example.invalid>", WHY, ("lib/core.py",))
