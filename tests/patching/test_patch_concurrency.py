"""Patch commands as real, concurrent and killed processes on one fake site-packages.

Every run here is a `python -m torch_tensorrt_ext.patching.cli patch ...` child process; the
`TTE_PATCH_TEST_PAUSE` hook (patching/testhook.py) stops a child at a named point so the test can
race it or SIGKILL it there, deterministically.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from patch_fixtures import (A1, A2, ALPHA, B2, BETA, G3, GAMMA, NAMES, OTHER,  # noqa: E402
                            sha, snapshot, target, three_patches, write_series, write_site)

from torch_tensorrt_ext.patching import cli  # noqa: E402
from torch_tensorrt_ext.patching.state import read_state  # noqa: E402

LOCK = "torch_tensorrt_ext_patches.lock"
RECORD = "torch_tensorrt_ext_patches.json"
PATCHED = {"alpha.py": A2, "beta.py": B2, "gamma.py": G3}
PRISTINE = {"alpha.py": ALPHA, "beta.py": BETA, "gamma.py": GAMMA}


@pytest.fixture
def env(tmp_path):
    site = write_site(tmp_path / "site", "fake-pkg", "1.0", {
        "fake_pkg/alpha.py": ALPHA, "fake_pkg/beta.py": BETA, "fake_pkg/gamma.py": GAMMA})
    patches = write_series(tmp_path / "patches", {"fakepkg": target(), "other": OTHER},
                           {"fakepkg": three_patches()})
    return site, patches, tmp_path


class Run:
    """One CLI child process; stderr is read on a thread so a pause marker can be awaited."""

    def __init__(self, command: str, site: Path, patches: Path, *extra: str, pause: str = "",
                 resume: Path = None, timeout: str = "60", delay: str = ""):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", TTE_PATCH_LOCK_TIMEOUT=timeout,
                   TTE_PATCH_TEST_DELAY=delay)
        env.pop("TTE_PATCH_TEST_PAUSE", None)
        if pause:
            env["TTE_PATCH_TEST_PAUSE"] = pause
        if resume is not None:
            env["TTE_PATCH_TEST_RESUME"] = str(resume)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torch_tensorrt_ext.patching.cli", "patch", command,
             "--site-packages", str(site), "--patches", str(patches), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.err_lines: list[str] = []
        self.out = ""
        self._paused = threading.Event()
        self._err = threading.Thread(target=self._read_err, daemon=True)
        self._err.start()

    def _read_err(self):
        for line in self.proc.stderr:
            self.err_lines.append(line)
            if line.startswith("tte-test: paused at "):
                self._paused.set()

    def wait_paused(self, seconds: float = 60.0) -> None:
        assert self._paused.wait(seconds), (
            f"pid {self.proc.pid} never reached its pause point; stderr: {self.err_lines}")

    def wait_err(self, text: str, seconds: float = 60.0) -> None:
        """Until a line of stderr contains `text` (fails if the process ends first)."""
        deadline = time.monotonic() + seconds
        while not any(text in line for line in self.err_lines):
            assert self.proc.poll() is None, f"pid {self.proc.pid} ended: {self.err_lines}"
            assert time.monotonic() < deadline, f"no {text!r} on stderr: {self.err_lines}"
            time.sleep(0.05)

    def finish(self, seconds: float = 120.0) -> int:
        self.out = self.proc.stdout.read()
        rc = self.proc.wait(seconds)
        self._err.join(10)
        return rc

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.finish() == -signal.SIGKILL

    @property
    def err(self) -> str:
        return "".join(self.err_lines)


def marker(run: Run, point: str) -> str:
    return f"tte-test: paused at {point} (pid {run.proc.pid})\n"


def waiting_line(command: str, site: Path, seconds: str = "60") -> re.Pattern:
    return re.compile(re.escape(f"torch-tensorrt-ext patch {command}: waiting up to {seconds} s "
                                f"for another torch-tensorrt-ext patch run")
                      + r"( \(pid \d+, `patch (apply|revert)`\))?"
                      + re.escape(f", which holds {site / LOCK}\n"))


def installed(site: Path):
    return {n: (site / "fake_pkg" / n).read_bytes() for n in PRISTINE}


def consistent(site: Path) -> bool:
    """Every file pristine, or exactly as the record in place says it was patched."""
    state = read_state(site)
    files = state.targets["fakepkg"].files if state else {}
    return all(sha(data) == sha(PRISTINE[name]) or (
        f"src/{name}" in files and sha(data) == files[f"src/{name}"].patched_sha256)
        for name, data in installed(site).items())


def staging(site: Path) -> list[str]:
    return sorted(str(p.relative_to(site)) for p in site.rglob("*.tte-tmp"))


def cli_run(capsys, command, site, patches, *extra):
    rc = cli.main(["patch", command, "--site-packages", str(site), "--patches", str(patches),
                   *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def start_together(runs: list[Run], go: Path) -> None:
    """Every run paused at `before-lock`; then all are let go at once."""
    for r in runs:
        r.wait_paused()
    go.touch()


# Each racing run sleeps 0.3 s right after taking the lock, before it reads anything: without the
# lock they would all read the same state and all write (the issue saw a false "something other
# than this patch series modified it" in 4 of 18 unlocked races).
HOLD = "locked:0.3"


def test_concurrent_applies_all_succeed_and_one_writes(env):
    site, patches, tmp = env
    go = tmp / "go"
    runs = [Run("apply", site, patches, pause="before-lock", resume=go, delay=HOLD)
            for _ in range(6)]
    start_together(runs, go)
    assert [r.finish() for r in runs] == [0] * 6, [r.err for r in runs]
    wrote = (f"fakepkg 1.0: applied {', '.join(NAMES)}\nother 2.0: no patches\n"
             f"3 file(s) written in {site}; record: {RECORD}\n")
    noop = f"the patch series is already applied in {site}; nothing to do\n"
    assert sorted(r.out for r in runs) == sorted([wrote] + [noop] * 5)
    for r in runs:
        rest = r.err.replace(marker(r, "before-lock"), "", 1)
        assert rest == "" or waiting_line("apply", site).fullmatch(rest), rest
    assert installed(site) == PATCHED
    state = read_state(site)
    assert [p.name for p in state.targets["fakepkg"].patches] == NAMES
    assert not (site / LOCK).exists() and staging(site) == []


def test_apply_racing_revert_ends_in_a_recorded_state(env):
    site, patches, tmp = env
    go = tmp / "go"
    # An apply that writes sleeps between its renames (record in place, files not yet); each
    # revert sleeps before reading: unlocked, a revert lands in the apply's gap.
    delays = {"apply": "after-first-rename:0.6", "revert": HOLD}
    runs = [Run(cmd, site, patches, pause="before-lock", resume=go, delay=delays[cmd])
            for cmd in ("apply", "revert") * 3]
    start_together(runs, go)
    assert [r.finish() for r in runs] == [0] * 6, [r.err for r in runs]
    # In a serial history, writing applies and restoring reverts alternate, starting unapplied.
    wrote = sum(r.out.endswith(f"3 file(s) written in {site}; record: {RECORD}\n") for r in runs)
    restored = sum(r.out == f"restored 3 file(s) in {site} to the pristine release\n"
                   for r in runs)
    others = {r.out for r in runs} - {
        f"fakepkg 1.0: applied {', '.join(NAMES)}\nother 2.0: no patches\n"
        f"3 file(s) written in {site}; record: {RECORD}\n",
        f"restored 3 file(s) in {site} to the pristine release\n",
        f"the patch series is already applied in {site}; nothing to do\n",
        f"no patches are recorded in {site}; nothing to revert\n"}
    assert others == set()
    state = read_state(site)
    assert wrote - restored == (0 if state is None else 1), [r.out for r in runs]
    assert consistent(site)
    if state is None:
        assert installed(site) == PRISTINE
    else:
        assert installed(site) == PATCHED
        assert {rp: f.patched_sha256 for rp, f in state.targets["fakepkg"].files.items()} == {
            f"src/{n}": sha(d) for n, d in PATCHED.items()}
    assert not (site / LOCK).exists() and staging(site) == []


def test_revert_waits_for_an_apply_that_holds_the_lock(env, capsys):
    """Before the lock, this revert found no record yet, said 'nothing to revert' and left the
    files patched once the apply finished."""
    site, patches, tmp = env
    go = tmp / "go"
    apply = Run("apply", site, patches, pause="after-stage", resume=go)
    apply.wait_paused()
    revert = Run("revert", site, patches)
    revert.wait_err("patch revert: waiting up to 60 s for")    # blocked on the lock
    time.sleep(0.5)
    assert revert.proc.poll() is None and installed(site) == PRISTINE
    go.touch()
    assert apply.finish() == 0
    assert revert.finish() == 0
    assert revert.out == f"restored 3 file(s) in {site} to the pristine release\n"
    assert waiting_line("revert", site).fullmatch(revert.err)
    assert "(pid " + str(apply.proc.pid) + ", `patch apply`)" in revert.err
    assert installed(site) == PRISTINE and read_state(site) is None
    assert not (site / LOCK).exists() and staging(site) == []


def test_a_busy_lock_times_out_naming_the_holder_then_a_kill_frees_it(env, capsys, monkeypatch):
    site, patches, _ = env
    holder = Run("apply", site, patches, pause="locked")
    holder.wait_paused()
    before = snapshot(site)
    lock = site / LOCK
    monkeypatch.setenv("TTE_PATCH_LOCK_TIMEOUT", "0.5")
    rc, out, err = cli_run(capsys, "status", site, patches)
    who = f"another torch-tensorrt-ext patch run (pid {holder.proc.pid}, `patch apply`)"
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch status: waiting up to 0.5 s for {who}, which "
                   f"holds {lock}\n"
                   f"torch-tensorrt-ext patch status: error: {who} holds the lock {lock}; gave "
                   f"up after waiting 0.5 s. Nothing was changed. Let that run finish and "
                   f"retry, or wait longer with --lock-timeout SECONDS (or "
                   f"TTE_PATCH_LOCK_TIMEOUT=SECONDS). The lock is released when that process "
                   f"exits, even if it is killed; do not delete the file\n")
    rc, _, err = cli_run(capsys, "apply", site, patches, "--lock-timeout", "0")
    assert rc == 1 and err.startswith(f"torch-tensorrt-ext patch apply: waiting up to 0 s for "
                                      f"{who}, which holds {lock}\n")
    assert snapshot(site) == before

    holder.kill()                      # the kernel drops its lock; its lock file stays behind
    assert lock.exists()
    rc, out, err = cli_run(capsys, "apply", site, patches)
    assert (rc, err) == (0, "")
    assert out.endswith(f"3 file(s) written in {site}; record: {RECORD}\n")
    assert installed(site) == PATCHED and not lock.exists()


def test_a_run_killed_after_staging_is_cleaned_up_by_the_next_one(env, capsys):
    site, patches, _ = env
    before = snapshot(site)
    run = Run("apply", site, patches, pause="after-stage")
    run.wait_paused()
    left = staging(site)
    assert [re.sub(r"\.[^./]+\.tte-tmp$", ".*.tte-tmp", p) for p in left] == [
        ".torch_tensorrt_ext_patches.json.*.tte-tmp", "fake_pkg/.alpha.py.*.tte-tmp",
        "fake_pkg/.beta.py.*.tte-tmp", "fake_pkg/.gamma.py.*.tte-tmp"]
    run.kill()
    assert {k: v for k, v in snapshot(site).items() if k not in left + [LOCK]} == before

    rc, out, err = cli_run(capsys, "status", site, patches)
    assert (rc, err) == (0, "")
    assert out == (f"removed 4 staging file(s) left by an interrupted patch run: "
                   f"{', '.join(left)}\nfakepkg 1.0: fake-pkg 1.0 in {site}\n"
                   + "".join(f"  not applied  {n}\n" for n in NAMES) + "other 2.0: no patches\n")
    assert snapshot(site) == before
    rc, out, _ = cli_run(capsys, "apply", site, patches)
    assert rc == 0 and out.endswith(f"3 file(s) written in {site}; record: {RECORD}\n")
    assert installed(site) == PATCHED and staging(site) == []


def test_an_apply_killed_between_renames_leaves_a_state_the_next_apply_completes(env, capsys):
    """The record is renamed into place first: a kill after it leaves recorded, pristine files."""
    site, patches, _ = env
    run = Run("apply", site, patches, pause="after-first-rename")
    run.wait_paused()
    left = staging(site)
    run.kill()
    assert installed(site) == PRISTINE and read_state(site) is not None and consistent(site)
    rc, out, _ = cli_run(capsys, "apply", site, patches)
    assert rc == 0
    assert out == (f"removed 3 staging file(s) left by an interrupted patch run: "
                   f"{', '.join(left)}\nfakepkg 1.0: applied {', '.join(NAMES)}\n"
                   f"other 2.0: no patches\n3 file(s) written in {site}; record: {RECORD}\n")
    assert installed(site) == PATCHED and staging(site) == []


def test_a_revert_killed_between_renames_is_finished_by_the_next_revert(env, capsys):
    site, patches, _ = env
    assert cli_run(capsys, "apply", site, patches)[0] == 0
    run = Run("revert", site, patches, pause="after-first-rename")
    run.wait_paused()
    left = staging(site)
    run.kill()
    assert installed(site) == {"alpha.py": ALPHA, "beta.py": B2, "gamma.py": G3}
    assert consistent(site)
    rc, out, err = cli_run(capsys, "revert", site, patches)
    assert (rc, err) == (0, "")
    assert out == (f"removed 2 staging file(s) left by an interrupted patch run: "
                   f"{', '.join(left)}\nrestored 2 file(s) in {site} to the pristine release\n")
    assert installed(site) == PRISTINE and read_state(site) is None and staging(site) == []


def test_an_apply_of_a_changed_series_killed_between_renames_leaves_no_unrecorded_patch(
        env, capsys):
    """Three patches applied, then a series of only the first: alpha changes from one patched
    content to another, beta and gamma leave the record. Before the ordering, the new record went
    first and a kill left alpha matching neither record nor pristine (apply refused it) and beta
    and gamma patched with no record at all."""
    site, patches, tmp = env
    assert cli_run(capsys, "apply", site, patches)[0] == 0
    one = write_series(tmp / "one", {"fakepkg": target()}, {"fakepkg": three_patches()[:1]})
    run = Run("apply", site, one, pause="after-first-rename")
    run.wait_paused()
    run.kill()
    assert installed(site) == {"alpha.py": ALPHA, "beta.py": B2, "gamma.py": G3}
    assert consistent(site)
    rc, out, err = cli_run(capsys, "apply", site, one)
    assert (rc, err) == (0, "")
    assert out.endswith(f"fakepkg 1.0: applied {NAMES[0]}\n3 file(s) written in {site}; "
                        f"record: {RECORD}\n")
    assert installed(site) == {"alpha.py": A1, "beta.py": BETA, "gamma.py": GAMMA}
    assert list(read_state(site).targets["fakepkg"].files) == ["src/alpha.py"]
    assert consistent(site) and staging(site) == []
