"""Installed distributions, read from the `*.dist-info` folders of one site-packages directory.

Invariant: versions and file hashes come only from the dist-info METADATA and RECORD inside the
site-packages directory being patched — never from the running interpreter's import machinery —
so `--site-packages DIR` inspects exactly DIR. Names compare in PEP 503 normalised form. Of a set
of alternative distributions that install the same files, at most one may be installed.
"""
from __future__ import annotations

import base64
import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence

from .errors import PatchError


@dataclass(frozen=True)
class Distribution:
    name: str                     # as written in METADATA
    version: str
    dist_info: Path
    record: dict[str, str] = field(default_factory=dict)  # site path -> sha256 hex (from RECORD)


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def find_distribution(site: Path, name: str) -> Distribution | None:
    """The distribution `name` installed in `site`, or None; two installs of it are an error."""
    want = normalise(name)
    found: list[Distribution] = []
    for dist_info in sorted(Path(site).glob("*.dist-info")):
        meta = dist_info / "METADATA"
        if not meta.is_file():
            continue
        headers = _metadata(meta)
        if normalise(headers.get("name", "")) == want:
            found.append(Distribution(headers["name"], headers.get("version", "?"), dist_info,
                                      _record(dist_info / "RECORD")))
    if len(found) > 1:
        listed = ", ".join(d.dist_info.name for d in found)
        raise PatchError(f"{name} is installed more than once in {site} ({listed}); uninstall "
                         f"the extra copies (pip uninstall {name}, then reinstall the pinned one)")
    return found[0] if found else None


def find_one_of(site: Path, names: Sequence[str]) -> Distribution | None:
    """The one installed distribution among `names` (alternatives that install the same files),
    or None; more than one of them installed is an error naming each."""
    found = [d for d in (find_distribution(site, n) for n in names) if d is not None]
    if len(found) > 1:
        listed = " and ".join(f"{d.name} {d.version} ({d.dist_info.name})" for d in found)
        both = "both " if len(found) == 2 else ""
        raise PatchError(f"{site} has {both}{listed} installed; they ship the same files, so "
                         f"uninstalling one also deletes files of the other: pip uninstall "
                         f"{' '.join(d.name for d in found)}, then install the one this machine "
                         f"needs with pip install --no-deps NAME==VERSION")
    return found[0] if found else None


def _metadata(path: Path) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and key.lower() in ("name", "version"):
            headers.setdefault(key.lower(), value.strip())
    return headers


def _record(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    for row in csv.reader(io.StringIO(path.read_text(encoding="utf-8", errors="replace"))):
        if len(row) >= 2 and row[1].startswith("sha256="):
            digest = row[1][len("sha256="):]
            padded = digest + "=" * (-len(digest) % 4)
            try:
                out[row[0]] = base64.urlsafe_b64decode(padded).hex()
            except ValueError:
                continue
    return out
