"""`patch apply|revert|status|check` on a fake site-packages (CPU, no real upstream needed)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

from helpers import REPO
from torch_tensorrt_ext.patching import bundled
from patch_fixtures import (run, A1, A2, ALPHA, B2, BETA, G3, GAMMA, NAMES, OTHER,  # noqa: E402
                            replace_line, sha, snapshot, target, three_patches, write_series,
                            write_site)


@pytest.fixture
def env(tmp_path):
    """(site, patches): fake-pkg 1.0 installed, a three-patch series, a target not installed."""
    site = write_site(tmp_path / "site", "fake-pkg", "1.0", {
        "fake_pkg/alpha.py": ALPHA, "fake_pkg/beta.py": BETA, "fake_pkg/gamma.py": GAMMA,
        "fake_pkg/untouched.py": b"print('untouched')\n",
        "fake_pkg/__pycache__/alpha.cpython-311.pyc": b"stale bytecode",
        "fake_pkg/__pycache__/untouched.cpython-311.pyc": b"kept bytecode"})
    patches = write_series(tmp_path / "patches", {"fakepkg": target(), "other": OTHER},
                           {"fakepkg": three_patches()})
    return site, patches


def installed(site):
    return {n: (site / "fake_pkg" / n).read_bytes() for n in ("alpha.py", "beta.py", "gamma.py")}


def test_apply_then_revert_is_byte_identical(env, capsys):
    site, patches = env
    before = snapshot(site)
    rc, out, err = run(capsys, "apply", site, patches)
    assert (rc, err) == (0, "")
    assert out == (f"fakepkg 1.0: applied {', '.join(NAMES)}\nother 2.0: no patches\n"
                   f"3 file(s) written in {site}; record: torch_tensorrt_ext_patches.json\n")
    assert installed(site) == {"alpha.py": A2, "beta.py": B2, "gamma.py": G3}
    assert not (site / "fake_pkg/__pycache__/alpha.cpython-311.pyc").exists()
    assert (site / "fake_pkg/__pycache__/untouched.cpython-311.pyc").read_bytes() == \
        b"kept bytecode"

    rc, out, err = run(capsys, "revert", site, patches)
    assert (rc, out, err) == (0, f"restored 3 file(s) in {site} to the pristine release\n", "")
    expected = dict(before)
    del expected["fake_pkg/__pycache__/alpha.cpython-311.pyc"]
    assert snapshot(site) == expected
    rc, out, _ = run(capsys, "revert", site, patches)
    assert (rc, out) == (0, f"no patches are recorded in {site}; nothing to revert\n")


def test_apply_twice_is_a_no_op(env, capsys):
    site, patches = env
    assert run(capsys, "apply", site, patches)[0] == 0
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in site.rglob("*") if p.is_file()}
    rc, out, err = run(capsys, "apply", site, patches)
    assert (rc, out, err) == (0, f"the patch series is already applied in {site}; nothing to do\n",
                              "")
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns)
            for p in site.rglob("*") if p.is_file()} == before


def test_apply_is_all_or_nothing_when_the_third_patch_fails(tmp_path, env, capsys):
    site, _ = env
    patches = write_series(tmp_path / "bad", {"fakepkg": target(), "other": OTHER},
                           {"fakepkg": three_patches(third_applies=False)})
    before = snapshot(site)
    rc, out, err = run(capsys, "apply", site, patches)
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch apply: error: patch fakepkg/{NAMES[2]} does not "
                   f"apply to the pristine fake-pkg 1.0 files (src/gamma.py): error: patch "
                   f"failed: src/gamma.py:2; error: src/gamma.py: patch does not apply; fix the "
                   f"patch on a checkout (patch import / edit / patch export)\n"
                   f"Nothing was changed.\n")
    assert snapshot(site) == before


def test_refuses_a_wrong_installed_version(tmp_path, capsys):
    site = write_site(tmp_path / "site", "fake-pkg", "1.1", {"fake_pkg/alpha.py": ALPHA,
                                                            "fake_pkg/beta.py": BETA,
                                                            "fake_pkg/gamma.py": GAMMA})
    patches = write_series(tmp_path / "patches", {"fakepkg": target()},
                           {"fakepkg": three_patches()})
    before = snapshot(site)
    rc, out, err = run(capsys, "apply", site, patches)
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch apply: error: fake-pkg: the series is pinned to "
                   f"version 1.0 ({patches / 'upstream.toml'}) but {site} has 1.1 "
                   f"(fake_pkg-1.1.dist-info); install the pinned release (pip install --no-deps "
                   f"fake-pkg==1.0), or port the series to 1.1 (see `torch-tensorrt-ext patch "
                   f"drift`)\nNothing was changed.\n")
    assert snapshot(site) == before


def test_refuses_a_modified_baseline_file(env, capsys):
    site, patches = env
    edited = replace_line(BETA, 1, "001 someone edited beta")
    (site / "fake_pkg/beta.py").write_bytes(edited)
    before = snapshot(site)
    rc, out, err = run(capsys, "apply", site, patches)
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch apply: error: fake-pkg 1.0: src/beta.py "
                   f"({site / 'fake_pkg/beta.py'}) has sha256 {sha(edited)}, expected {sha(BETA)} "
                   f"(the pristine file of the pinned release, {patches / 'upstream.toml'}); "
                   f"something other than this patch series modified it: reinstall it (pip "
                   f"install --force-reinstall --no-deps fake-pkg==1.0) and run "
                   f"`torch-tensorrt-ext patch apply` again\nNothing was changed.\n")
    assert snapshot(site) == before


def test_patches_for_a_target_that_is_not_installed_are_an_error(tmp_path, capsys):
    site = tmp_path / "empty-site"
    site.mkdir()
    patches = write_series(tmp_path / "patches", {"fakepkg": target()},
                           {"fakepkg": three_patches()})
    rc, out, err = run(capsys, "apply", site, patches)
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch apply: error: fake-pkg: the series has 3 patch(es) "
                   f"for it ({', '.join(NAMES)}) but no fake-pkg dist-info is installed in "
                   f"{site}; install fake-pkg==1.0 there (pip install --no-deps fake-pkg==1.0) "
                   f"or pass --site-packages DIR\nNothing was changed.\n")
    assert list(site.iterdir()) == []


def test_no_torch_tensorrt_names_the_extras_that_install_one(tmp_path, monkeypatch, capsys):
    """A model author's venv with the wheel but neither TensorRT extra: `patch apply` names both
    extras, as the installed package's metadata declares them (pyproject.toml's)."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    metadata = [f'{r}; extra == "{e}"' for e, reqs in extras.items() for r in reqs]
    monkeypatch.setattr(bundled.importlib.metadata, "requires",
                        lambda name: metadata if name == "torch-tensorrt-ext" else None)
    site = tmp_path / "empty-site"
    site.mkdir()
    both = {**target(), "distributions": ["torch-tensorrt", "torch-tensorrt-rtx"]}
    del both["distribution"]
    patches = write_series(tmp_path / "patches", {"fakepkg": both}, {"fakepkg": three_patches()})
    rc, out, err = run(capsys, "apply", site, patches)
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch apply: error: torch-tensorrt or torch-tensorrt-rtx: "
                   f"the series has 3 patch(es) for it ({', '.join(NAMES)}) but neither is "
                   f"installed in {site}; install one of them there, never "
                   f"both (pip install 'torch-tensorrt-ext[rtx]' (torch-tensorrt-rtx) or "
                   f"'torch-tensorrt-ext[gpu]' (torch-tensorrt)) or pass --site-packages DIR\n"
                   f"Nothing was changed.\n")
    assert list(site.iterdir()) == []


def test_status_reports_applied_not_applied_and_stale(env, capsys):
    site, patches = env
    header = f"fakepkg 1.0: fake-pkg 1.0 in {site}\n"
    rc, out, _ = run(capsys, "status", site, patches)
    assert (rc, out) == (0, header + "".join(f"  not applied  {n}\n" for n in NAMES)
                         + "other 2.0: no patches\n")
    run(capsys, "apply", site, patches)
    rc, out, _ = run(capsys, "status", site, patches)
    assert out == (header + "".join(f"  applied      {n}\n" for n in NAMES)
                   + "other 2.0: no patches\n")

    (site / "fake_pkg/alpha.py").write_bytes(A2 + b"# a manual edit\n")
    rc, out, _ = run(capsys, "status", site, patches)
    assert (rc, out) == (0, header
                         + f"  stale        {NAMES[0]}: src/alpha.py changed since apply\n"
                         + f"  stale        {NAMES[1]}: src/alpha.py changed since apply\n"
                         + f"  applied      {NAMES[2]}\nother 2.0: no patches\n")


def test_revert_refuses_a_file_edited_since_apply_unless_forced(env, capsys):
    site, patches = env
    run(capsys, "apply", site, patches)
    edited = A2 + b"# a manual edit\n"
    (site / "fake_pkg/alpha.py").write_bytes(edited)
    before = snapshot(site)
    rc, out, err = run(capsys, "revert", site, patches)
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch revert: error: fake-pkg 1.0: src/alpha.py "
                   f"({site / 'fake_pkg/alpha.py'}) changed since `patch apply` (sha256 "
                   f"{sha(edited)}, apply left {sha(A2)}); reverting would discard that change. "
                   f"Reinstall it (pip install --force-reinstall --no-deps fake-pkg==1.0) and "
                   f"revert again, or `patch revert --force` to restore the recorded pristine "
                   f"copy anyway\nNothing was changed.\n")
    assert snapshot(site) == before
    assert run(capsys, "revert", site, patches, "--force")[0] == 0
    assert installed(site) == {"alpha.py": ALPHA, "beta.py": BETA, "gamma.py": GAMMA}


def test_check_writes_nothing_before_and_after_apply(env, capsys):
    site, patches = env
    before = snapshot(site)
    rc, out, err = run(capsys, "check", site, patches)
    assert (rc, err) == (0, "")
    assert out == ("fakepkg 1.0: 3 patch(es) apply to the pinned baseline (3 file(s), from the "
                   "installed files)\n" + "".join(f"  clean                {n}\n" for n in NAMES)
                   + "other 2.0: no patches\n")
    assert snapshot(site) == before
    run(capsys, "apply", site, patches)
    (site / "fake_pkg/gamma.py").write_bytes(b"edited after apply\n")
    applied = snapshot(site)
    rc, out, _ = run(capsys, "check", site, patches)
    assert rc == 0 and "(3 file(s), from the recorded pristine copies)" in out
    assert snapshot(site) == applied


def test_apply_follows_a_changed_series_and_a_reinstall(tmp_path, env, capsys):
    site, patches = env
    run(capsys, "apply", site, patches)
    one = write_series(tmp_path / "one", {"fakepkg": target()},
                       {"fakepkg": three_patches()[:1]})
    rc, out, _ = run(capsys, "apply", site, one)
    assert rc == 0 and out.endswith(f"3 file(s) written in {site}; record: "
                                    f"torch_tensorrt_ext_patches.json\n")
    assert installed(site) == {"alpha.py": A1, "beta.py": BETA, "gamma.py": GAMMA}
    # pip install --force-reinstall puts the pristine files back; the record stays behind.
    (site / "fake_pkg/alpha.py").write_bytes(ALPHA)
    rc, out, _ = run(capsys, "status", site, one)
    assert out.splitlines()[1] == f"  not applied  {NAMES[0]}"
    assert run(capsys, "apply", site, patches)[0] == 0
    assert installed(site) == {"alpha.py": A2, "beta.py": B2, "gamma.py": G3}


@pytest.mark.parametrize("read_only", ["site", "package"])
def test_read_only_site_packages_fails_cleanly(read_only):
    """A read-only site-packages: nothing changes, the error names the file and what to do.

    Tests run as root, which ignores file modes; the CLI then runs in a child that imports
    everything as root and drops to an unprivileged uid before patching (a real EACCES)."""
    tmp = Path(tempfile.mkdtemp(prefix="tte-ro-"))
    try:
        os.chmod(tmp, 0o755)
        site = write_site(tmp / "site", "fake-pkg", "1.0", {"fake_pkg/alpha.py": ALPHA,
                                                           "fake_pkg/beta.py": BETA,
                                                           "fake_pkg/gamma.py": GAMMA})
        patches = write_series(tmp / "patches", {"fakepkg": target()},
                               {"fakepkg": three_patches()})
        locked = site if read_only == "site" else site / "fake_pkg"
        if read_only == "package":
            os.chmod(site, 0o777)  # the record could be written; the package folder cannot
        for p in [locked, *locked.rglob("*")]:
            os.chmod(p, 0o555 if p.is_dir() else 0o444)
        before = snapshot(site)
        # A read-only site-packages fails at the lock file, the first file every command writes.
        blocked = (site / "torch_tensorrt_ext_patches.lock" if read_only == "site"
                   else site / "fake_pkg/alpha.py")
        drop = "os.setgroups([]); os.setgid(65534); os.setuid(65534); " if os.geteuid() == 0 else ""
        code = ("import os, sys; import torch_tensorrt_ext.patching.cli as c; " + drop +
                f"sys.exit(c.main(['patch', 'apply', '--site-packages', {str(site)!r}, "
                f"'--patches', {str(patches)!r}]))")
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", HOME=str(tmp))
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, cwd=tmp)
        assert (proc.returncode, proc.stdout) == (1, "")
        assert proc.stderr == (f"torch-tensorrt-ext patch apply: error: cannot write "
                               f"{blocked}: Permission denied; nothing was changed. Run as a "
                               f"user who can write to {blocked.parent} (the "
                               f"owner of the environment), or point --site-packages at a "
                               f"writable copy\n")
        assert snapshot(site) == before
    finally:
        for p in [tmp, *tmp.rglob("*")]:
            os.chmod(p, 0o755)
        shutil.rmtree(tmp)


def test_a_target_dropped_from_the_manifest_is_restored(tmp_path, env, capsys):
    site, patches = env
    run(capsys, "apply", site, patches)
    without = write_series(tmp_path / "without", {"other": OTHER}, {})
    rc, out, err = run(capsys, "apply", site, without)
    assert (rc, err) == (0, "")
    assert out == (f"other 2.0: no patches\n3 file(s) written in {site}; record: "
                   f"torch_tensorrt_ext_patches.json\n")
    assert installed(site) == {"alpha.py": ALPHA, "beta.py": BETA, "gamma.py": GAMMA}
    assert not (site / "torch_tensorrt_ext_patches.json").exists()
