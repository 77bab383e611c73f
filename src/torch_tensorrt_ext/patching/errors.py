"""The one error type of the patch tooling.

Invariant: every failure the tooling can foresee is raised as `PatchError`, whose message names the
patch, file or package involved and says what to do; the CLI prints it and exits 1 without a
traceback. A `PatchError` raised before any write means nothing was changed.
"""
from __future__ import annotations

from ..errors import TteError


class PatchError(TteError):
    """A foreseen failure of the patch tooling; `str()` is the full user-facing message."""
