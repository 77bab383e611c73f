"""The end user's `patch apply|status|revert` never import the contributor tooling
(`torch_tensorrt_ext.patching.contributor`): a fresh interpreter runs them through the console
script's `main` on a fake site-packages, then lists the modules it holds."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from patch_fixtures import (ALPHA, BETA, GAMMA, snapshot, target, three_patches, write_series,
                            write_site)

CONTRIBUTOR = "torch_tensorrt_ext.patching.contributor"

# argv lists of `torch-tensorrt-ext ...`, run in order in one process; after each, the
# contributor modules loaded so far
CHILD = f"""
import contextlib, io, json, sys
from torch_tensorrt_ext import cli
runs = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        rc = cli.main(argv)
    loaded = sorted(m for m in sys.modules if m == {CONTRIBUTOR!r} or
                    m.startswith({CONTRIBUTOR!r} + "."))
    runs.append([argv[1], rc, out.getvalue(), loaded])
print(json.dumps(runs))
"""


def _run_child(*commands: list[str]) -> list[list]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(commands)],
                          capture_output=True, text=True, env=env)
    assert (proc.returncode, proc.stderr) == (0, "")
    return json.loads(proc.stdout)


def test_apply_status_revert_load_no_contributor_module(tmp_path):
    site = write_site(tmp_path / "site", "fake-pkg", "1.0", {
        "fake_pkg/alpha.py": ALPHA, "fake_pkg/beta.py": BETA, "fake_pkg/gamma.py": GAMMA})
    patches = write_series(tmp_path / "patches", {"fakepkg": target()},
                           {"fakepkg": three_patches()})
    before = snapshot(site)
    where = ["--site-packages", str(site), "--patches", str(patches)]
    runs = _run_child(["patch", "apply", *where], ["patch", "status", *where],
                      ["patch", "revert", *where], ["patch", "check", *where])
    seen = {command: (rc, loaded) for command, rc, _, loaded in runs}
    # the commands did their work: apply patched all three files, status saw them applied,
    # revert restored the release byte for byte
    assert runs[0][2].startswith("fakepkg 1.0: applied 0001")
    assert runs[1][2].count("applied      ") == 3
    assert snapshot(site) == before
    assert {c: seen[c] for c in ("apply", "status", "revert")} == {
        "apply": (0, []), "status": (0, []), "revert": (0, [])}
    # the probe sees the subpackage where it is loaded: `check` runs upstream's hooks through it
    assert seen["check"][0] == 0 and f"{CONTRIBUTOR}.upstream_lint" in seen["check"][1]
