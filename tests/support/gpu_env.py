"""What the GPU tier (tests/gpu) needs of the machine, in the standard library and pytest alone:
it runs where only python3, pytest and CUDA are (a bundle from scripts/device_bundle.py) as well
as where the full Python stack is installed (cases built on the spot).

Invariant: the tier needs a CUDA device and nothing else to run: without one it is skipped as a
whole (`cuda_missing`, one line, tests/conftest.py); with one, every test runs except those that
need a TensorRT engine, which skip naming what is missing (`tensorrt_or_skip`). Anything else a
GPU runner lacks (the CUDA toolkit, cmake, compute-sanitizer, the cases) fails a test naming it.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STEPS = 8                      # the steps of a case built on the spot (the bundle's: its own)
FIGURES: list[str] = []        # lines printed at the end of the run (benchmark timings)


def cuda_missing() -> str | None:
    """Why this machine has no CUDA device (the driver's own answer), or None where it has one."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver (libcuda.so.1 not found)"
    rc = cuda.cuInit(0)
    if rc != 0:
        return f"no CUDA device (cuInit: error {rc})"
    n = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value == 0:
        return "no CUDA device (the driver sees none)"
    return None


def bundle() -> Path | None:
    """The bundle the cases come from ($TTE_DEVICE_BUNDLE), or None: built on the spot."""
    b = os.environ.get("TTE_DEVICE_BUNDLE")
    return Path(b).resolve() if b else None


def case_names() -> list[str]:
    """Every device case: the bundle's, or tests/support/device_cases.py's where the full Python
    stack is installed. Neither: an error naming both ways (not a skip: the machine has CUDA)."""
    b = bundle()
    if b is not None:
        names = sorted(p.name for p in (b / "cases").iterdir() if (p / "m.pte").is_file())
        assert names, f"{b}/cases holds no case: make the bundle with scripts/device_bundle.py"
        return names
    try:
        from device_cases import DEVICE_CASES
    except ImportError as e:
        raise RuntimeError(
            f"the GPU tier has no cases: the full Python stack is not importable ({e}); install "
            "it (scripts/setup.sh) or point TTE_DEVICE_BUNDLE at a bundle made by "
            "scripts/device_bundle.py") from e
    return sorted(DEVICE_CASES)


def tensorrt_or_skip():
    """torch_tensorrt where it can build and run TensorRT engines here; else skip the calling
    module naming what is missing."""
    def skip(why: str):
        pytest.skip(f"needs TensorRT: {why}", allow_module_level=True)
    try:
        import torch_tensorrt
    except Exception as e:   # ImportError, or OSError for a missing libnvinfer
        skip(f"torch_tensorrt is not importable ({type(e).__name__}: {e})")
    try:
        import torch_tensorrt_ext  # noqa: F401
    except Exception as e:
        skip(f"torch_tensorrt_ext is not importable ({type(e).__name__}: {e})")
    import torch
    if torch_tensorrt.ENABLED_FEATURES.tensorrt_rtx and torch.cuda.get_device_capability() == (
            9, 0):
        skip("torch_tensorrt here is TensorRT-RTX, which does not run on compute capability 9.0")
    return torch_tensorrt


# --------------------------------------------------------------------------- the CUDA build

@dataclass(frozen=True)
class CudaBuild:
    dir: Path
    tte_run: Path
    bench_copy_back: Path


def tool(name: str) -> str:
    """`cmake` / `ctest`: the Python environment's own (a venv's cmake >= 3.28) first."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    assert found, f"the GPU tier builds and tests the runtime with {name} (>= 3.28): none on PATH"
    return found


def _prefix_args(b: Path | None) -> list[str]:
    """Where ExecuTorch's C++ SDK (and, from a bundle, nlohmann-json and OpenSSL) are."""
    if b is not None:
        sdk = b / "sdk"
        return [f"-DCMAKE_PREFIX_PATH={sdk / 'executorch'};{sdk / 'nlohmann'}",
                f"-DOPENSSL_INCLUDE_DIR={sdk / 'openssl' / 'include'}",
                f"-DOPENSSL_CRYPTO_LIBRARY={sdk / 'openssl' / 'lib' / 'libcrypto.so.3'}"]
    import executorch
    return [f"-DCMAKE_PREFIX_PATH={os.path.realpath(list(executorch.__path__)[0])}"]


def build_runtime(build_dir: Path) -> CudaBuild:
    """The runtime, its runner, ctest suite and copy-back benchmark built with the CUDA device
    (-DTTE_CUDA=ON) into `build_dir` (incremental where it was built before)."""
    cmake, b = tool("cmake"), bundle()
    configure = [cmake, "-S", str(REPO), "-B", str(build_dir), "-DTTE_CUDA=ON",
                 "-DCMAKE_BUILD_TYPE=RelWithDebInfo", f"-DTTE_PYTHON={sys.executable}",
                 *_prefix_args(b)]
    if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]
    for cmd in (configure, [cmake, "--build", str(build_dir), "-j", str(os.cpu_count() or 2)]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            pytest.fail(f"building the runtime with CUDA failed: {' '.join(cmd)}\n"
                        f"{(done.stdout + done.stderr)[-4000:]}", pytrace=False)
    built = CudaBuild(build_dir, build_dir / "runtime" / "tte_run",
                      build_dir / "runtime" / "tte_bench_copy_back")
    assert built.tte_run.exists() and built.bench_copy_back.exists(), (
        f"{build_dir}: no tte_run / tte_bench_copy_back after the build (is nvcc on PATH?)")
    if b is not None:   # the ctest payloads gen_payloads.py made on the bundle's machine
        shutil.copytree(b / "payloads", build_dir / "runtime" / "tests" / "payloads",
                        dirs_exist_ok=True)
    return built
