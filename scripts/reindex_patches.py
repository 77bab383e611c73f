#!/usr/bin/env python
"""Rewrite the project's patch series with the `index <old>..<new>` lines of the pinned releases'
blobs: for each target, a release checkout is made from this environment's patch record
(`patching.contributor.release_repo`), the series is imported onto it (git am), exported again (git
format-patch --full-index) — the contributor flow itself, so the files are what any later
`patch export` writes. Run after changing a patch by hand; an unchanged series is rewritten byte
for byte.

    .venv/bin/python scripts/reindex_patches.py [TARGET ...]
"""
from __future__ import annotations

import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(names) -> int:
    from torch_tensorrt_ext.patching.contributor.flow import export_series, import_series
    from torch_tensorrt_ext.patching.manifest import load_manifest
    from torch_tensorrt_ext.patching.contributor.release_repo import release_checkout
    from torch_tensorrt_ext.patching.series import load_series
    manifest = load_manifest(ROOT / "patches")
    site = Path(sysconfig.get_paths()["purelib"])
    for target in manifest.targets:
        if names and target.name not in names:
            continue
        with tempfile.TemporaryDirectory(prefix="tte-reindex-") as tmp:
            repo = release_checkout(site, manifest, target.name, Path(tmp) / "repo")
            import_series(repo, load_series(manifest, target.name))
            for line in export_series(repo, manifest, target.name):
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
