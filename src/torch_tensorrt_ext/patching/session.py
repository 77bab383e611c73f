"""A patch command's hold on one site-packages directory: the lock, then the leftovers cleaned.

Invariant: inside `session(...)` the command holds the site lock (`lock.SiteLock`), and every
staging file a killed run left beside the record, beside a file the series can touch or beside a
recorded file has been removed and reported in the lines it yields (or reported as not
removable). A read-only command that runs unlocked (see `lock`) removes nothing.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator, Sequence

from .errors import PatchError
from .lock import LockOptions, SiteLock
from .series import Series
from .state import read_state, sweep_staging


@contextmanager
def session(site: Path, command: str, lock: LockOptions, series: Sequence[Series],
            *, writes: bool) -> Iterator[list[str]]:
    """Hold the site lock for `command`; yields the lines about removed staging files."""
    with SiteLock(site, command, writes=writes, options=lock) as held:
        lines: list[str] = []
        if held.held:
            removed, failed = sweep_staging(site, _series_paths(series) + _recorded_paths(site))
            if removed:
                lines.append(f"removed {len(removed)} staging file(s) left by an interrupted "
                             f"patch run: {', '.join(str(p.relative_to(site)) for p in removed)}")
            if failed:
                lines.append(f"cannot remove {len(failed)} staging file(s) left by an "
                             f"interrupted patch run: {', '.join(failed)}; run `torch-tensorrt-ext "
                             f"patch apply` as the owner of {site}")
        yield lines


def _series_paths(series: Sequence[Series]) -> list[str]:
    return [s.target.site_path(rp) for s in series for rp in s.target.baseline]


def _recorded_paths(site: Path) -> list[str]:
    try:
        state = read_state(site)
    except PatchError:
        return []                      # the command itself reports the damaged record
    targets = state.targets.values() if state else ()
    return [f.site_path for t in targets for f in t.files.values()]
