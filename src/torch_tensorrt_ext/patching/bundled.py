"""The patch series shipped inside the package: `torch_tensorrt_ext/_data/patches`.

Invariant: `series_dir()` finds the series with `importlib.resources` only, never from where a
source checkout happens to be, so every install resolves it the same way: in a checkout (and an
editable install) `_data/patches` is a link to the repository's `patches/`, the one place the
series is edited; a wheel build copies the files it points at (pyproject.toml's package-data), so
a non-editable install holds the series itself. It returns a directory holding `upstream.toml`, or
raises `PatchError` naming the place it looked and what to do.
"""
from __future__ import annotations

import importlib.resources
from pathlib import Path

from .errors import PatchError
from .manifest import MANIFEST_NAME

PACKAGE = "torch_tensorrt_ext"
DISPLAY = f"{PACKAGE}/_data/patches"


def series_dir() -> Path:
    """The shipped series as a filesystem directory (the patch tooling reads it with paths)."""
    where = importlib.resources.files(PACKAGE) / "_data" / "patches"
    if not isinstance(where, Path):
        raise PatchError(f"the patch series {DISPLAY} is inside {where!r}, not on the file "
                         f"system; install the package unzipped or pass --patches DIR")
    if not (where / MANIFEST_NAME).is_file():
        raise PatchError(f"the package ships no patch series: {where / MANIFEST_NAME} is missing; "
                         f"reinstall torch-tensorrt-ext (in a checkout, {where} must link to the "
                         f"repository's patches/) or pass --patches DIR")
    return where
