"""What the patch commands say about a record they cannot use, and about a bad lock setting."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from patch_fixtures import (run, ALPHA, BETA, GAMMA, NAMES, snapshot, target,  # noqa: E402
                            three_patches, write_series, write_site)

from torch_tensorrt_ext.patching import cli  # noqa: E402

RECORD = "torch_tensorrt_ext_patches.json"


def damaged(path: Path) -> str:
    return (f"Move it aside (mv {path} {path}.damaged) and run `torch-tensorrt-ext patch "
            f"status`: patches it lists as `not applied` sit on pristine files and `patch apply` "
            f"will work; files it lists as differing from the pinned release were patched and "
            f"must be restored by reinstalling their package (pip install --force-reinstall "
            f"--no-deps NAME==VERSION)")


def make(root: Path):
    site = write_site(root / "site", "fake-pkg", "1.0", {
        "fake_pkg/alpha.py": ALPHA, "fake_pkg/beta.py": BETA, "fake_pkg/gamma.py": GAMMA})
    patches = write_series(root / "patches", {"fakepkg": target()}, {"fakepkg": three_patches()})
    return site, patches


@pytest.mark.parametrize("command", ["apply", "revert", "status", "check"])
def test_a_corrupt_record_names_the_file_the_json_error_and_what_to_do(tmp_path, capsys, command):
    site, patches = make(tmp_path)
    record = site / RECORD
    record.write_text('{"format": 1, "targets": {')
    before = snapshot(site)
    rc, out, err = run(capsys, command, site, patches)
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch {command}: error: the patch record {record} is not "
                   f"valid JSON (Expecting property name enclosed in double quotes: line 1 "
                   f"column 27 (char 26)); nothing was changed. {damaged(record)}\n")
    assert snapshot(site) == before


def test_a_record_of_another_format_says_which_version_can_revert_it(tmp_path, capsys):
    site, patches = make(tmp_path)
    record = site / RECORD
    record.write_text('{"format": 2, "targets": {}}')
    rc, out, err = run(capsys, "apply", site, patches)
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch apply: error: the patch record {record} is not one "
                   f"this version of torch-tensorrt-ext understands (UsageError: format 2, "
                   f"expected 1); nothing was changed. If another version wrote it, run that "
                   f"version's `patch revert`. Otherwise: {damaged(record)}\n")


def unprivileged(tmp: Path, command: str, site: Path, patches: Path):
    """`patch <command>` in a child that drops to uid 65534 (tests run as root, which reads and
    writes any file)."""
    drop = "os.setgroups([]); os.setgid(65534); os.setuid(65534); " if os.geteuid() == 0 else ""
    code = ("import os, sys; import torch_tensorrt_ext.patching.cli as c; " + drop +
            f"sys.exit(c.main(['patch', {command!r}, '--site-packages', {str(site)!r}, "
            f"'--patches', {str(patches)!r}]))")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", HOME=str(tmp))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=tmp)


def test_status_in_a_site_packages_the_user_cannot_write_runs_unlocked():
    """No lock file can be made there and none exists, so no run holds the lock: status reads."""
    tmp = Path(tempfile.mkdtemp(prefix="tte-ro-status-"))
    try:
        os.chmod(tmp, 0o755)
        site, patches = make(tmp)
        assert cli.main(["patch", "apply", "--site-packages", str(site), "--patches",
                         str(patches)]) == 0
        before = snapshot(site)
        proc = unprivileged(tmp, "status", site, patches)
        assert (proc.returncode, proc.stderr) == (0, "")
        assert proc.stdout == (f"fakepkg 1.0: fake-pkg 1.0 in {site}\n" + "".join(
            f"  applied      {n}\n" for n in NAMES))
        assert snapshot(site) == before
    finally:
        for p in [tmp, *tmp.rglob("*")]:
            os.chmod(p, 0o755)
        shutil.rmtree(tmp)


def test_a_record_the_user_cannot_read_says_permission_denied_not_reinstall():
    """The unprivileged user cannot create the lock file either, so `status` (read-only) runs
    unlocked and fails at the record."""
    tmp = Path(tempfile.mkdtemp(prefix="tte-rec-"))
    try:
        os.chmod(tmp, 0o755)
        site, patches = make(tmp)
        assert cli.main(["patch", "apply", "--site-packages", str(site), "--patches",
                         str(patches)]) == 0
        record = site / RECORD
        os.chmod(record, 0o600)
        before = snapshot(site)
        proc = unprivileged(tmp, "status", site, patches)
        assert (proc.returncode, proc.stdout) == (1, "")
        assert proc.stderr == (f"torch-tensorrt-ext patch status: error: cannot read the patch "
                               f"record {record}: Permission denied; nothing was changed. Run "
                               f"as a user who can read it (the owner of the environment), or "
                               f"make it readable (chmod a+r {record})\n")
        assert snapshot(site) == before
    finally:
        for p in [tmp, *tmp.rglob("*")]:
            os.chmod(p, 0o755)
        shutil.rmtree(tmp)


def test_a_bad_lock_timeout_is_refused(tmp_path, capsys, monkeypatch):
    site, patches = make(tmp_path)
    monkeypatch.setenv("TTE_PATCH_LOCK_TIMEOUT", "soon")
    rc, out, err = run(capsys, "status", site, patches)
    assert (rc, out) == (1, "")
    assert err == ("torch-tensorrt-ext patch status: error: TTE_PATCH_LOCK_TIMEOUT='soon' is not "
                   "a number of seconds >= 0; set it to e.g. 60, or unset it for the default of "
                   "60 s\n")
    rc, out, err = run(capsys, "status", site, patches, "--lock-timeout", "-1")
    assert (rc, out) == (1, "")
    assert err == ("torch-tensorrt-ext patch status: error: --lock-timeout -1 is not a number of "
                   "seconds >= 0\n")


def test_a_missing_site_packages_directory_is_named(tmp_path, capsys):
    _, patches = make(tmp_path)
    missing = tmp_path / "nowhere"
    rc, out, err = run(capsys, "apply", missing, patches)
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch apply: error: {missing} is not an existing "
                   f"directory; pass --site-packages DIR naming the site-packages directory to "
                   f"work on\n")
