"""Upstream's own tests as a peer suite: torch-tensorrt's tests for this area
(third_party/torch_tensorrt_tests, vendored; nothing is fetched) run twice — as released against
the pristine 2.14.0 files, and with the series' own changes to them (each patch changes upstream's
tests as its upstream pull request would) against the patched files — and compared test by test;
likewise ExecuTorch's own tests of the files its patches touch, as the executorch wheel ships them
(`ET_TESTS`), pristine against patched.

Invariant: every test that passes on the baseline passes on the patched files, with no exception
list: where the series changes behaviour on purpose, the patch that changes it changes upstream's
test too, in upstream's test file (the patches' sections on `tests/`, pinned in
patches/upstream.toml's [targets.torch_tensorrt.tests]). A test those changes rename or replace
is absent from the patched run and reported as such (the patch shows it); every test of the
patched run that fails there and not on the baseline (one the series adds, a module that no
longer collects) fails the run too. Exit 0 when that holds, 1 otherwise.

The baseline is stock 2.14.0 plus the series' first patch only (0001, engines built ahead of time
on a machine without a GPU): stock 2.14.0 cannot even be imported on a CPU machine (it asks CUDA
for a device at import), so without 0001 no upstream test runs here. The baseline run imports
torch_tensorrt and executorch from an overlay: the installed packages mirrored as symbolic links,
each file the series patched replaced by its pristine bytes from the series' own record in
site-packages (`patching.state`), then 0001 applied there by the series' own `patch apply`. The
patched run imports the installed packages and runs a copy of the vendored files with the series'
test changes applied (by the series' own `git apply` of those sections), with the same
interpreter.

Usage: .venv/bin/python scripts/upstream_peer.py [--keep DIR]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "third_party" / "torch_tensorrt_tests"


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


def _patched_tests(series_list, tests: Path, dst: Path, *, strict: bool = True) -> Path:
    """A copy of upstream's tests with the series' changes to them applied (the test sections
    of its patches: what each patch's upstream pull request changes). `strict` (the vendored
    files, the release's): every change must apply cleanly; otherwise (a later upstream
    checkout) a change applies with fuzz or is reported and left out."""
    from torch_tensorrt_ext.patching.gitapply import apply_series
    shutil.copytree(tests, dst)
    for series in series_list:
        files = {rp: (tests / rp).read_bytes() for rp in series.test_files
                 if (tests / rp).is_file()}
        patched, results = apply_series(files, series.patches, which="tests", fuzz=not strict,
                                        keep_going=not strict)
        broken = [r for r in results if not r.applied]
        if broken and strict:
            sys.exit(f"upstream_peer: {broken[0].patch.label}'s changes to upstream's tests do "
                     f"not apply to the vendored files: {'; '.join(broken[0].notes)}")
        for r in broken:
            print(f"  ({r.patch.label}'s changes to upstream's tests do not apply here: "
                  f"{'; '.join(r.notes)[:200]})")
        for rp, data in patched.items():
            (dst / rp).write_bytes(data)
    return dst


# ExecuTorch's own tests of the files its patches touch, as the executorch wheel ships them
ET_TESTS = {"exir/emit/_emitter.py": ("exir/emit/test/test_emit.py",),
            "backends/cuda/cuda_weight_collector.py": ("backends/cuda/tests/test_cuda_export.py",
                                                      "backends/cuda/tests/test_missing_weights_blob.py")}


def _run(label: str, xml: Path, paths: list[Path], rootdir: Path, ini: Path,
         extra_path: str = "") -> dict[str, str]:
    """Test id -> passed / failed / skipped, from one pytest run over upstream's tests."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, env.get("PYTHONPATH", "")) if p)
    env.pop("TTE_DEVICE", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-c", str(ini), "--rootdir", str(rootdir),
         f"--junitxml={xml}", "-p", "no:randomly", "-p", "no:cacheprovider",
         "--continue-on-collection-errors", *map(str, paths)],
        cwd=rootdir, env=env, capture_output=True, text=True, timeout=1800)
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


def _compare(suite: str, baseline: str, before: dict[str, str], after: dict[str, str],
             changed: set[str] = frozenset()) -> bool:
    """Print how the patched run compares with the baseline; True when nothing was lost.
    `changed`: the test modules (dotted) the series' own test changes edit."""
    # a test those changes rename or replace is absent from the patched run (its module defines
    # it no more); any other test must be there and pass as it did
    def edited(t: str) -> bool:
        return any(t == m or t.startswith((m + ".", m + "::")) for m in changed)
    passed = [t for t, o in before.items() if o == "passed"]
    replaced = sorted(t for t in passed if t not in after and edited(t))
    lost = sorted(t for t in passed if after.get(t) != "passed" and t not in replaced)
    gained = sorted(t for t, o in after.items() if o == "passed" and before.get(t) != "passed")
    broken = sorted(t for t, o in after.items() if o == "failed" and t not in before)
    count = {label: {k: sum(1 for o in run.values() if o == k)
                     for k in ("passed", "failed", "skipped")}
             for label, run in (("baseline", before), ("patched", after))}
    print(f"{suite} ({len(before)} tests): baseline ({baseline}) {count['baseline']}, patched "
          f"{count['patched']}")
    for t in lost:
        print(f"  LOST  {t}")
    for t in broken:
        print(f"  FAILS (only in the patched run: a test the series adds, or a module that no "
              f"longer collects)  {t}")
    for t in replaced:
        print(f"  replaced by the series' changes to upstream's tests  {t}")
    if gained:
        print(f"  {len(gained)} pass only patched (e.g. {gained[0]})")
    if lost or broken:
        print(f"  {len(lost)} test(s) pass on the baseline and not with the series, "
              f"{len(broken)} of the series' fail")
        return False
    print(f"  every test that passes on the baseline passes with the series ({len(replaced)} "
          "renamed or replaced by its test changes)")
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="keep the overlay and the reports here")
    ap.add_argument("--tests", type=Path, default=TESTS,
                    help="upstream's tests from elsewhere: a folder holding tests/py/... (e.g. a "
                         "later upstream checkout's; default: the vendored ones)")
    args = ap.parse_args()
    tests = args.tests.resolve()
    site = Path(sysconfig.get_paths()["purelib"])
    from torch_tensorrt_ext.patching.manifest import load_manifest
    from torch_tensorrt_ext.patching.series import load_series
    manifest = load_manifest(ROOT / "patches")
    series = {t.name: load_series(manifest, t.name) for t in manifest.targets}
    untested = set(series["executorch"].files) - set(ET_TESTS)
    if untested:
        sys.exit(f"upstream_peer: the executorch series touches {sorted(untested)}; name "
                 "ExecuTorch's tests of it in ET_TESTS")
    with tempfile.TemporaryDirectory(prefix="tte-peer-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        overlay = _overlay(site, work / "pristine")
        patched_tests = _patched_tests(series.values(), tests, work / "patched-tests",
                                       strict=tests == TESTS)
        changed = {t.removesuffix(".py").replace("/", ".")
                   for s in series.values() for t in s.test_files}
        # ExecuTorch's: each run imports its test files from the tree under test (pytest puts
        # the folder above the packages first on sys.path), pristine or patched
        ini = work / "empty.ini"
        ini.write_text("[pytest]\n")
        files = [f for rp, fs in ET_TESTS.items() for f in fs]
        runs = {   # four independent pytest processes, two at a time (CI has two cores)
            "baseline": ("baseline", work / "baseline.xml", [tests / "tests"], tests,
                         TESTS / "pytest.ini", str(overlay)),
            "patched": ("patched", work / "patched.xml", [patched_tests / "tests"],
                        patched_tests, TESTS / "pytest.ini"),
            "et baseline": ("executorch baseline", work / "et-baseline.xml",
                            [overlay / "executorch" / f for f in files], overlay, ini,
                            str(overlay)),
            "et patched": ("executorch patched", work / "et-patched.xml",
                           [site / "executorch" / f for f in files], site, ini)}
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            done = dict(zip(runs, pool.map(lambda a: _run(*a), runs.values()), strict=True))
        ok = _compare("torch-tensorrt's tests", "stock 2.14.0 + 0001", done["baseline"],
                      done["patched"], changed)
        ok = _compare("ExecuTorch's tests of the files its patches touch", "stock 1.5.1",
                      done["et baseline"], done["et patched"]) and ok
    if not ok:
        print("upstream_peer: a behaviour changed on purpose changes upstream's test in the patch "
              "that changes it (patch import / edit tests/ / patch export)")
        return 1
    print("upstream_peer: every upstream test that passes on the baseline passes with the series")
    return 0


if __name__ == "__main__":
    sys.exit(main())
