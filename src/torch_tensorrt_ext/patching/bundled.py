"""The patch series shipped inside the package: `torch_tensorrt_ext/_data/patches`.

Invariant: `series_dir()` finds the series with `importlib.resources` only, never from where a
source checkout happens to be, so every install resolves it the same way: in a checkout (and an
editable install) `_data/patches` is a link to the repository's `patches/`, the one place the
series is edited; a wheel build copies the files it points at (pyproject.toml's
[tool.scikit-build]), so a non-editable install holds the series itself. It returns a directory
holding `upstream.toml`, or raises `PatchError` naming the place it looked and what to do.
`extras_installing()` reads this package's installed metadata, nothing else: which of its pip
extras (`[rtx]`, `[gpu]`) installs which upstream distribution.
"""
from __future__ import annotations

import importlib.metadata
import importlib.resources
import re
from pathlib import Path

from collections.abc import Sequence

from .dists import normalise
from .errors import PatchError
from .manifest import MANIFEST_NAME

PACKAGE = "torch_tensorrt_ext"
DISTRIBUTION = "torch-tensorrt-ext"
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


def extras_installing(names: Sequence[str]) -> dict[str, str]:
    """{distribution: this package's extra that installs it} for those of `names` an extra of
    the installed torch-tensorrt-ext requires (its METADATA's `Requires-Dist: X; extra == "E"`);
    empty where the package has no installed metadata."""
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    wanted = {normalise(n): n for n in names}
    found: dict[str, str] = {}
    for req in requires:
        name = re.match(r"[A-Za-z0-9._-]+", req)
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", req)
        if name and extra and normalise(name.group()) in wanted:
            found.setdefault(wanted[normalise(name.group())], extra.group(1))
    return found
