"""Upstream's own tests as a peer suite: torch-tensorrt's tests for this area
(third_party/torch_tensorrt_tests, vendored; nothing is fetched) run twice — against the pristine
2.14.0 files and against the patched ones — and compared test by test.

Invariant: every test that passes on the baseline passes on the patched files, or is listed in
scripts/upstream_peer_changes.toml with the reason it changes on purpose; a listed test that no
longer changes is an error too (the list stays true). Exit 0 when that holds, 1 otherwise.

The baseline is stock 2.14.0 plus the series' first patch only (0001, engines built ahead of time
on a machine without a GPU): stock 2.14.0 cannot even be imported on a CPU machine (it asks CUDA
for a device at import), so without 0001 no upstream test runs here. The baseline run imports
torch_tensorrt and executorch from an overlay: the installed packages mirrored as symbolic links,
each file the series patched replaced by its pristine bytes from the series' own record in
site-packages (`patching.state`), then 0001 applied there by the series' own `patch apply`. The
patched run imports the installed packages. Both run the same vendored files with the same
interpreter.

Usage: .venv/bin/python scripts/upstream_peer.py [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "third_party" / "torch_tensorrt_tests"
CHANGES = ROOT / "scripts" / "upstream_peer_changes.toml"


BASELINE_PATCHES = 1   # the torch_tensorrt series' first patch (see the module docstring)


def _overlay(site: Path, dst: Path) -> Path:
    """A site directory whose torch_tensorrt and executorch are the baseline files."""
    from torch_tensorrt_ext.patching.state import read_state
    state = read_state(site)
    if state is None:
        sys.exit(f"upstream_peer: the series is not applied in {site} (no record); run "
                 "`torch-tensorrt-ext patch apply` first")
    pristine = {f.site_path: f.pristine for t in state.targets.values() for f in t.files.values()}
    for top in sorted({p.split("/", 1)[0] for p in pristine}):
        for dirpath, _, files in os.walk(site / top):
            rel = Path(dirpath).relative_to(site)
            (dst / rel).mkdir(parents=True, exist_ok=True)
            for name in files:
                (dst / rel / name).symlink_to(Path(dirpath) / name)
        for info in site.glob(f"{top.replace('torch_tensorrt', 'torch_tensorrt*')}-*.dist-info"):
            (dst / info.name).symlink_to(info, target_is_directory=True)
    for site_path, data in pristine.items():
        (dst / site_path).unlink()
        (dst / site_path).write_bytes(data)
    series = dst.parent / "baseline-series"
    shutil.copytree(ROOT / "patches", series)
    for target in ("torch_tensorrt", "executorch"):
        order = series / target / ".patches"
        names = order.read_text().splitlines()
        keep = names[:BASELINE_PATCHES if target == "torch_tensorrt" else 0]
        for name in names[len(keep):]:
            (series / target / name).unlink()
        order.write_text("".join(f"{name}\n" for name in keep))
    done = subprocess.run([sys.executable, "-m", "torch_tensorrt_ext.cli", "patch", "apply",
                           "--site-packages", str(dst), "--patches", str(series)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        sys.exit(f"upstream_peer: applying the baseline to the overlay failed:\n{done.stderr}")
    return dst


def _run(label: str, xml: Path, extra_path: str = "") -> dict[str, str]:
    """Test id -> passed / failed / skipped, from one pytest run over the vendored tests."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, env.get("PYTHONPATH", "")) if p)
    env.pop("TTE_DEVICE", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-c", str(TESTS / "pytest.ini"),
         "--rootdir", str(TESTS), f"--junitxml={xml}", "-p", "no:randomly", str(TESTS / "tests")],
        cwd=TESTS, env=env, capture_output=True, text=True, timeout=1800)
    if not xml.is_file():
        sys.exit(f"upstream_peer: the {label} run produced no report:\n{done.stdout[-3000:]}"
                 f"{done.stderr[-3000:]}")
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        tid = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        out[tid] = ("failed" if kinds & {"failure", "error"} else
                    "skipped" if "skipped" in kinds else "passed")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="keep the overlay and the reports here")
    args = ap.parse_args()
    site = Path(sysconfig.get_paths()["purelib"])
    with tempfile.TemporaryDirectory(prefix="tte-peer-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        overlay = _overlay(site, work / "pristine")
        before = _run("baseline", work / "baseline.xml", str(overlay))
        after = _run("patched", work / "patched.xml")
    listed = tomllib.loads(CHANGES.read_text())["changes"]
    lost = sorted(t for t, o in before.items() if o == "passed" and after.get(t) != "passed")
    gained = sorted(t for t, o in after.items() if o == "passed" and before.get(t) != "passed")
    unexplained = [t for t in lost if t not in listed]
    stale = sorted(t for t in listed if t not in lost)
    count = {label: {k: sum(1 for o in run.values() if o == k)
                     for k in ("passed", "failed", "skipped")}
             for label, run in (("baseline", before), ("patched", after))}
    print(f"upstream peer suite ({len(before)} tests): baseline (stock 2.14.0 + 0001) "
          f"{count['baseline']}, patched {count['patched']}")
    by_reason: dict[str, int] = {}
    for t in lost:
        if t in listed:
            by_reason[listed[t]] = by_reason.get(listed[t], 0) + 1
        else:
            print(f"  LOST  {t}")
    for reason, n in sorted(by_reason.items(), key=lambda kv: -kv[1]):
        print(f"  {n:3d} changed on purpose: {reason[:160]}{'...' if len(reason) > 160 else ''}")
    print(f"  {len(gained)} pass only patched (e.g. {gained[0]})" if gained else "")
    for t in stale:
        print(f"  STALE entry (passes, or fails on the baseline too)  {t}")
    if unexplained or stale:
        print(f"upstream_peer: {len(unexplained)} unexplained loss(es), {len(stale)} stale "
              f"entr(ies) in {CHANGES.relative_to(ROOT)}")
        return 1
    print(f"upstream_peer: no unexplained loss ({len(lost)} listed change(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
