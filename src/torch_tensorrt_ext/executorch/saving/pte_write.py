"""Writing a `.pte` to its destination all or nothing.

Invariant: `write_atomic(path, write)` leaves `path` either as it was (and no temporary file
behind, whatever `write` raised) or holding exactly the bytes `write` produced, flushed to disk:
the bytes go to a fresh temporary file in the destination's directory, which is fsynced and then
`os.replace`d over the destination (atomic within one file system), and the directory is fsynced.
The new file gets the mode `open(path, "wb")` would give it (0o666 less the umask).
`check_destination(path)` refuses, before any work is done, a destination that cannot be written.
A writer killed mid-write leaves its temporary file (`.<name>.<pid>.<hex>.tte-tmp`); the next
`write_atomic` to the same destination removes those whose process is gone.
"""
from __future__ import annotations

import glob
import os
import secrets
from pathlib import Path
from typing import BinaryIO
from collections.abc import Callable

from ...errors import TteError

__all__ = ["write_atomic", "check_destination", "DestinationError"]

_TMP_SUFFIX = ".tte-tmp"


class DestinationError(TteError, ValueError):
    """A `.pte` destination that cannot be written; the message names it and says why."""


def check_destination(path: str | Path) -> Path:
    """`path` as a Path if a `.pte` can be written there, else `DestinationError`.

    Writability is probed by creating (and removing) a temporary file in the directory, the
    same operation `write_atomic` starts with, so the answer holds for root and read-only
    mounts alike."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise DestinationError(f"{p}: is a directory; give a file path such as "
                               f"{p / 'model.pte'}")
    if not parent.exists():
        raise DestinationError(f"{p}: directory {parent} does not exist; create it first")
    if not parent.is_dir():
        raise DestinationError(f"{p}: {parent} is not a directory")
    probe = _temp_name(p)
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as e:
        raise DestinationError(f"{p}: cannot write in directory {parent} ({e.strerror})") \
            from None
    os.unlink(probe)
    return p


def _temp_name(dest: Path) -> Path:
    directory = dest.parent if str(dest.parent) else Path(".")
    return directory / f".{dest.name}.{os.getpid()}.{secrets.token_hex(4)}{_TMP_SUFFIX}"


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # a directory we cannot open for reading: the rename itself has happened
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on directories
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_temps(dest: Path, directory: Path) -> None:
    """Temporary files for `dest` left by writers that were killed (their pid is gone)."""
    prefix = f".{dest.name}."
    for p in directory.glob(f".{glob.escape(dest.name)}.*{_TMP_SUFFIX}"):
        pid = p.name[len(prefix):-len(_TMP_SUFFIX)].split(".")[0]
        if pid.isdigit() and not _alive(int(pid)):
            try:
                p.unlink()
            except OSError:
                pass


def write_atomic(path: str | Path, write: Callable[[BinaryIO], None]) -> Path:
    """Call `write(f)` on a temporary file next to `path`, then move it over `path`.

    Temporary files for `path` left by a writer that was killed (SIGKILL, power loss) are
    removed first."""
    dest = Path(path)
    directory = dest.parent if str(dest.parent) else Path(".")
    _remove_stale_temps(dest, directory)
    tmp = _temp_name(dest)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(directory)
    return dest
