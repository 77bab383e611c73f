"""One advisory lock per site-packages directory, held by every patch command that touches it.

Invariant: `apply`, `revert`, `status` and `check` hold an exclusive `flock` on
`<site-packages>/torch_tensorrt_ext_patches.lock` from before they read the patch record until
after their last write, so no two of them interleave. A command that cannot get the lock within
the timeout (`--lock-timeout`, else `TTE_PATCH_LOCK_TIMEOUT`, else 60 s) fails naming the holder's
pid, which the holder writes into the lock file. The kernel drops the lock when its holder exits
or is killed, so a dead run never blocks the next one. The holder deletes the lock file before it
lets go; a waiter that then gets the lock on the deleted file sees that the path no longer names
it and starts over, so the lock file never outlives a run. Only a read-only command in a directory
it cannot write, where no lock file exists, runs without the lock (no writer holds one then).
"""
from __future__ import annotations

import errno
import fcntl
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

from . import testhook
from .errors import PatchError

LOCK_NAME = "torch_tensorrt_ext_patches.lock"
TIMEOUT_ENV = "TTE_PATCH_LOCK_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
_POLL = 0.05
_NO_ACCESS = (errno.EACCES, errno.EPERM, errno.EROFS)


@dataclass(frozen=True)
class LockOptions:
    """How long to wait for the lock (None: the environment or the default) and whom to tell."""

    timeout: float | None = None
    on_wait: Callable[[str], None] | None = None   # called once, when the lock is busy


def lock_path(site: Path) -> Path:
    return Path(site) / LOCK_NAME


def resolve_timeout(timeout: float | None) -> float:
    """The wait in seconds: the argument, else $TTE_PATCH_LOCK_TIMEOUT, else 60."""
    if timeout is None:
        raw = os.environ.get(TIMEOUT_ENV, "").strip()
        if not raw:
            return DEFAULT_TIMEOUT
        try:
            timeout = float(raw)
        except ValueError:
            timeout = math.nan
        if not math.isfinite(timeout) or timeout < 0:
            raise PatchError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds >= 0; set it to "
                             f"e.g. 60, or unset it for the default of {DEFAULT_TIMEOUT:g} s")
    if not math.isfinite(timeout) or timeout < 0:
        raise PatchError(f"--lock-timeout {timeout:g} is not a number of seconds >= 0")
    return timeout


class SiteLock:
    """`with SiteLock(site, "apply", writes=True, options=...) as lock:`; `lock.held` is False
    only for a read-only command that runs unlocked (see the module invariant)."""

    def __init__(self, site: Path, command: str, *, writes: bool,
                 options: LockOptions = LockOptions()):
        self.site = Path(site)
        self.path = lock_path(site)
        self.command = command
        self.writes = writes
        self.options = options
        self.held = False
        self._fd: int | None = None

    def __enter__(self) -> SiteLock:
        timeout = resolve_timeout(self.options.timeout)
        testhook.pause("before-lock")
        deadline = time.monotonic() + timeout
        told = False
        while True:
            fd = self._open()
            if fd is None:
                return self
            while not _try_lock(fd):
                if not told and self.options.on_wait is not None:
                    self.options.on_wait(f"waiting up to {timeout:g} s for {self._holder()}, "
                                         f"which holds {self.path}")
                    told = True
                left = deadline - time.monotonic()
                if left <= 0:
                    os.close(fd)
                    raise PatchError(self._busy(timeout))
                time.sleep(min(_POLL, left))
            if _names(self.path, fd):
                break
            os.close(fd)               # the holder deleted that file on release: start over
        self._fd, self.held = fd, True
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {self.command}\n".encode(), 0)
        except OSError:
            pass                       # opened read-only: the lock holds, only the pid is unknown
        testhook.pause("locked")
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is None:
            return
        try:
            os.unlink(self.path)       # while still held: waiters on this file start over
        except OSError:
            pass
        os.close(self._fd)
        self._fd, self.held = None, False

    def _open(self) -> int | None:
        flags = os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | flags, 0o644)
        except (FileNotFoundError, NotADirectoryError):
            raise PatchError(f"{self.site} is not an existing directory; pass --site-packages "
                             f"DIR naming the site-packages directory to work on") from None
        except OSError as exc:
            if exc.errno not in _NO_ACCESS:
                raise PatchError(f"cannot open the lock file {self.path}: {exc.strerror or exc}; "
                                 f"fix the cause and retry") from None
            if self.writes:
                raise PatchError(f"cannot write {self.path}: {exc.strerror}; nothing was "
                                 f"changed. Run as a user who can write to {self.site} (the "
                                 f"owner of the environment), or point --site-packages at a "
                                 f"writable copy") from None
        try:
            return os.open(self.path, os.O_RDONLY | flags)
        except FileNotFoundError:
            return None                # no lock file and none can be made here: nobody holds it
        except OSError as exc:
            raise PatchError(f"cannot open the lock file {self.path}: {exc.strerror or exc}; run "
                             f"as a user who can read it (the owner of the environment)") from None

    def _holder(self) -> str:
        try:
            pid, _, command = self.path.read_text().strip().partition(" ")
        except (OSError, UnicodeDecodeError):
            pid = command = ""
        if pid.isdigit():
            what = f", `patch {command}`" if command else ""
            return f"another torch-tensorrt-ext patch run (pid {pid}{what})"
        return "another torch-tensorrt-ext patch run"

    def _busy(self, timeout: float) -> str:
        return (f"{self._holder()} holds the lock {self.path}; gave up after waiting "
                f"{timeout:g} s. Nothing was changed. Let that run finish and retry, or wait "
                f"longer with --lock-timeout SECONDS (or {TIMEOUT_ENV}=SECONDS). The lock is "
                f"released when that process exits, even if it is killed; do not delete the "
                f"file")


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _names(path: Path, fd: int) -> bool:
    """Whether `path` still names the file open as `fd`."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)
