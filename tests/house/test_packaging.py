"""Packaging: what ships inside the Python package, found with importlib.resources.

A wheel of this checkout (`pip wheel --no-deps --no-build-isolation`: scikit-build-core compiles
the C++ runtime, its build tree kept in build/wheel so a rerun only rebuilds what changed) is
tagged for CPython 3.11 on Linux x86-64 and carries the patch series (byte for byte), the runtime
library (its runpath relative: it finds the executorch wheel beside it) and its CMake package
config. Installed into a --target DIR and run from there (PYTHONPATH first, so torch and
executorch still come from this venv), its `torch-tensorrt-ext` console script applies, reports
and reverts the series on a pristine site-packages with no --patches, a C++ project finds
`tte_runtime` there with find_package, and the checkout resolves the same places as the install.
(scripts/wheel_check.sh does the same as a user would, from a fresh clone into a new venv.)
"""
from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from helpers import REPO
from torch_tensorrt_ext import cli as tte_cli
from torch_tensorrt_ext import runtime_lib
from torch_tensorrt_ext.patching import bundled
from torch_tensorrt_ext.patching.dists import find_one_of
from torch_tensorrt_ext.patching.errors import PatchError
from torch_tensorrt_ext.patching.manifest import load_manifest
from torch_tensorrt_ext.patching.state import read_state

REPO = REPO
VENV_SITE = Path(sysconfig.get_paths()["purelib"])
LIB = Path("torch_tensorrt_ext") / "_lib"
SERIES = Path("torch_tensorrt_ext") / "_data" / "patches"

PROBE = r"""
import json, torch_tensorrt_ext
from torch_tensorrt_ext.patching import bundled
from torch_tensorrt_ext import runtime_lib
lib = runtime_lib.load()
print(json.dumps({"package": torch_tensorrt_ext.__file__, "series": str(bundled.series_dir()),
                  "search": [str(p) for p in runtime_lib.search_path()],
                  "library": str(runtime_lib.library_path()), "version": runtime_lib.version()}))
"""


def _files(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _env(site: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != runtime_lib.ENV_VAR}
    env["PYTHONPATH"] = str(site)
    return env


def _pip(*args: str, cwd: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args, "--no-deps", "--no-index", "-q",
                           "--disable-pip-version-check"],
                          cwd=cwd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel of this checkout, built with this venv's scikit-build-core, CMake and executorch."""
    if importlib.util.find_spec("scikit_build_core") is None:
        pytest.fail(f"the build backend scikit-build-core is not installed in {sys.prefix}; run "
                    f"`bash scripts/setup.sh` (it installs it)")
    tmp = tmp_path_factory.mktemp("dist")
    _pip("wheel", "--no-build-isolation", "-C", f"build-dir={REPO / 'build' / 'wheel'}",
         "-w", str(tmp), str(REPO), cwd=tmp)
    (found,) = tmp.glob("*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """(temp dir, the --target dir the wheel is installed into)."""
    tmp = tmp_path_factory.mktemp("wheel")
    site = tmp / "site"
    _pip("install", "--no-compile", "--target", str(site), str(wheel), cwd=tmp)
    return tmp, site


def test_the_wheel_is_tagged_for_cpython_311_on_linux_x86_64(wheel):
    assert wheel.name == "torch_tensorrt_ext-0.1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel) as z:
        meta = z.read("torch_tensorrt_ext-0.1.0.dist-info/WHEEL").decode().splitlines()
        names = set(z.namelist())
    assert "Root-Is-Purelib: false" in meta
    assert "Tag: cp311-cp311-linux_x86_64" in meta
    assert {f"torch_tensorrt_ext/_lib/lib/{runtime_lib.LIB_NAME}",
            "torch_tensorrt_ext/_lib/bin/tte_run",
            "torch_tensorrt_ext/_lib/lib/cmake/tte_runtime/tte_runtimeConfig.cmake"} <= names


@pytest.fixture(scope="module")
def probe(installed):
    tmp, site = installed
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp, env=_env(site),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_install_carries_the_series_byte_for_byte(installed, probe):
    _, site = installed
    assert probe["package"] == str(site / "torch_tensorrt_ext" / "__init__.py")
    assert probe["series"] == str(site / SERIES)
    assert not (site / SERIES).is_symlink()
    shipped = _files(REPO / "patches")
    del shipped[".gitattributes"]  # git's checkout setting, not part of the series
    assert _files(site / SERIES) == shipped


def test_the_install_loads_its_own_runtime_library(installed, probe):
    _, site = installed
    copy = site / LIB / "lib" / runtime_lib.LIB_NAME
    assert probe["search"] == [str(copy)]  # no checkout around the install: no build tree
    assert probe["library"] == str(copy)
    assert probe["version"].startswith("tte-runtime 0.1 (engines: reference")
    # relocatable: the library and the runner find executorch's libraries beside the package,
    # wherever site-packages is, never at a path of the machine that built the wheel
    assert _runpath(copy) == ["$ORIGIN/../../../executorch/lib"]
    assert _runpath(site / LIB / "bin" / "tte_run") == ["$ORIGIN/../lib",
                                                        "$ORIGIN/../../../executorch/lib"]


def _runpath(elf: Path) -> list[str]:
    dynamic = subprocess.run([_tool("readelf"), "-d", str(elf)], capture_output=True, text=True,
                             check=True).stdout
    (line,) = [ln for ln in dynamic.splitlines() if "(RUNPATH)" in ln or "(RPATH)" in ln]
    return line.split("[", 1)[1].rstrip("]").split(":")


def _pristine_site(root: Path) -> Path:
    """A site-packages holding the pinned releases' dist-info and baseline files, pristine: from
    this venv, or from the pristine copies its patch record keeps of files it patched."""
    site = root / "pristine-site"
    state = read_state(VENV_SITE)
    for t in load_manifest(REPO / "patches").targets:
        dist = find_one_of(VENV_SITE, t.distributions)
        if dist is None or dist.version != t.version:
            pytest.skip(f"{t.pins} is not installed in {VENV_SITE}")
        shutil.copytree(dist.dist_info, site / dist.dist_info.name)
        record = state.targets.get(t.name) if state else None
        for rp, want in t.baseline.items():
            path = VENV_SITE / t.site_path(rp)
            kept = record.files.get(rp) if record else None
            for data in [path.read_bytes()] + ([kept.pristine] if kept else []):
                if hashlib.sha256(data).hexdigest() == want:
                    break
            else:
                pytest.skip(f"no pristine copy of {path} (installed file and patch record differ "
                            f"from the baseline)")
            (site / t.site_path(rp)).parent.mkdir(parents=True, exist_ok=True)
            (site / t.site_path(rp)).write_bytes(data)
    return site


def test_the_installed_console_script_applies_reports_and_reverts_the_series(installed):
    tmp, site = installed
    target = _pristine_site(tmp)
    pristine = _files(target)
    script = site / "bin" / "torch-tensorrt-ext"

    def run(*args):
        done = subprocess.run([str(script), "patch", *args, "--site-packages", str(target)],
                              cwd=tmp, env=_env(site), capture_output=True, text=True, timeout=300)
        assert (done.returncode, done.stderr) == (0, ""), done.stdout
        return done.stdout.splitlines()

    run("apply")
    assert _files(target) != pristine
    manifest = load_manifest(site / SERIES)
    reported = [line.split() for line in run("status") if line.startswith("  ")]
    assert reported == [["applied", p] for t in manifest.targets
                        for p in (site / SERIES / t.name / ".patches").read_text().split()]
    run("revert")
    assert _files(target) == pristine


def _tool(name: str) -> str:
    local = Path(sys.executable).parent / name
    found = str(local) if local.is_file() else shutil.which(name)
    if found is None:
        pytest.skip(f"no {name} next to {sys.executable} or on PATH")
    return found


def test_a_cpp_project_finds_the_installed_runtime_with_find_package(installed, probe):
    tmp, site = installed
    # site-packages as pip lays it out: the executorch wheel beside torch_tensorrt_ext, where
    # tte_runtimeConfig.cmake looks for executorch's own package config.
    fake = tmp / "cmake-site"
    shutil.copytree(site / LIB, fake / LIB)
    (fake / "executorch").symlink_to(VENV_SITE / "executorch", target_is_directory=True)
    # the example runner the package ships, built as an application would build it
    app = tmp / "app"
    shutil.copytree(fake / LIB / "share" / "tte_runtime" / "example", app)
    assert sorted(p.name for p in app.iterdir()) == ["CMakeLists.txt", "tte_run.cpp"]
    cmake = _tool("cmake")
    gen = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}"] \
        if shutil.which("ninja") or (Path(sys.executable).parent / "ninja").is_file() else []
    for cmd in ([cmake, "-S", str(app), "-B", str(app / "build"), *gen,
                 f"-DCMAKE_PREFIX_PATH={fake / LIB}"],
                [cmake, "--build", str(app / "build")]):
        done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    cache = (app / "build" / "CMakeCache.txt").read_text()
    assert f"tte_runtime_DIR:PATH={fake / LIB / 'lib' / 'cmake' / 'tte_runtime'}\n" in cache
    assert f"executorch_DIR:PATH={fake / 'executorch' / 'lib' / 'cmake' / 'executorch'}\n" in cache
    # it steps a reference-engine .pte: outputs equal eager's, state persisting across steps
    from device_cases import DEVICE_CASES, save_case
    from runtime_helpers import read_output
    steps = 4
    io = tmp / "io"
    io.mkdir()
    eager, _, _ = save_case(io, "ring_buffer", steps)
    ran = subprocess.run([str(app / "build" / "tte_run"), str(io / "m.pte"), "--io", str(io),
                          "--steps", str(steps), "--device", "emulated", "--reset"],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads(ran.stdout.splitlines()[-1])["reset"] is True
    for step in range(steps):
        want = DEVICE_CASES["ring_buffer"].call_eager(eager, step)
        torch.testing.assert_close(read_output(io, step, 0, want), want)


# ---------------------------------------------------------------------- the checkout, in-process

def test_the_checkout_resolves_the_series_through_the_package():
    found = bundled.series_dir()
    assert found == Path(str(importlib.resources.files("torch_tensorrt_ext"))) / "_data" / "patches"
    assert found.resolve() == (REPO / "patches").resolve()


def test_a_missing_series_names_the_place_and_the_fix(monkeypatch, tmp_path, capsys):
    resources = SimpleNamespace(files=lambda package: tmp_path)
    monkeypatch.setattr(bundled, "importlib", SimpleNamespace(resources=resources))
    where = tmp_path / "_data" / "patches"
    message = (f"the package ships no patch series: {where / 'upstream.toml'} is missing; "
               f"reinstall torch-tensorrt-ext (in a checkout, {where} must link to the "
               f"repository's patches/) or pass --patches DIR")
    with pytest.raises(PatchError) as e:
        bundled.series_dir()
    assert str(e.value) == message
    assert tte_cli.main(["patch", "check", "--site-packages", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"torch-tensorrt-ext patch check: error: {message}\n"


@pytest.fixture
def places(monkeypatch, tmp_path):
    package, build = tmp_path / "pkg" / runtime_lib.LIB_NAME, tmp_path / "build" / "lib.so"
    monkeypatch.delenv(runtime_lib.ENV_VAR, raising=False)
    monkeypatch.setattr(runtime_lib, "_package_copy", lambda: package)
    monkeypatch.setattr(runtime_lib, "_checkout_build", lambda: build)
    for p in (package, build):
        p.parent.mkdir()
    return package, build


def test_the_package_copy_wins_unless_the_build_tree_is_a_second_newer(places):
    package, build = places
    build.write_bytes(b"b")
    assert runtime_lib.library_path() == build
    package.write_bytes(b"p")
    os.utime(package, (1000.0, 1000.0))
    os.utime(build, (1000.9, 1000.9))
    assert runtime_lib.library_path() == package
    os.utime(build, (1001.0, 1001.0))
    assert runtime_lib.library_path() == build
    build.unlink()
    assert runtime_lib.library_path() == package


def test_no_runtime_library_lists_every_place_searched(places):
    package, build = places
    with pytest.raises(runtime_lib.RuntimeLibraryError) as e:
        runtime_lib.library_path()
    assert str(e.value) == (
        f"the torch-tensorrt-ext runtime library is not installed: searched {package}, {build}; "
        f"in a checkout run `bash scripts/build_runtime.sh` (it builds the library and installs "
        f"it into the package), else set $TTE_RUNTIME_LIB to a libtte_runtime.so")
