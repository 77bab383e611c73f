"""Which CUDA weight collector the test_cuda_weights* suites exercise, and helpers to read it.

The suites always test executorch's ``backends/cuda/cuda_weight_collector.py`` *with our patch*:
the installed module once ``torch-tensorrt-ext patch apply`` has patched site-packages, otherwise
a temporary copy of the pristine installed file with the patch applied by ``git apply``. The
stock 1.5.1 collector (for "upstream rejects this" tests) is a temporary copy of the pristine
file, recovered with ``git apply -R`` when the installed one is patched. Both copies are checked
against the baseline sha256 in ``patches/upstream.toml``.
"""
from __future__ import annotations

import hashlib
import importlib.util
import shutil
import struct
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
PATCH = REPO / "patches/executorch/0001-cuda-weight-collector-accept-compact-clones.patch"
REPO_PATH = "backends/cuda/cuda_weight_collector.py"
SEAM = "from torch_tensorrt_ext.cuda import weight_layout"
MANIFEST_MAGIC = b"ETCUDAFQN3"


def baseline_sha256() -> str:
    manifest = tomllib.loads((REPO / "patches/upstream.toml").read_text())
    return manifest["targets"]["executorch"]["baseline"][REPO_PATH]


def installed_collector_file() -> Path:
    spec = importlib.util.find_spec("executorch.backends.cuda.cuda_weight_collector")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).resolve()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _git_apply(root: Path, *flags: str) -> None:
    subprocess.run(
        ["git", "apply", *flags, str(PATCH)], cwd=root, check=True, capture_output=True, text=True
    )


def _copy_installed(root: Path) -> Path:
    target = root / REPO_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(installed_collector_file(), target)
    return target


def is_patched(path: Path) -> bool:
    return SEAM in path.read_text()


def load_patched_collector(root: Path) -> ModuleType:
    """The patched collector: the installed module if patched, else a patched temporary copy."""
    installed = installed_collector_file()
    if is_patched(installed):
        import executorch.backends.cuda.cuda_weight_collector as module

        assert Path(module.__file__).resolve() == installed
        return module
    assert _sha256(installed) == baseline_sha256(), (
        f"{installed} is neither pristine executorch 1.5.1 nor patched by {PATCH.name}"
    )
    target = _copy_installed(root)
    _git_apply(root)
    assert is_patched(target)
    return _load(target, "tte_patched_cuda_weight_collector")


def load_stock_collector(root: Path) -> ModuleType:
    """A temporary copy of the pristine executorch 1.5.1 collector."""
    target = _copy_installed(root)
    if is_patched(target):
        _git_apply(root, "-R")
    assert _sha256(target) == baseline_sha256()
    return _load(target, "tte_stock_cuda_weight_collector")


_LOADED: dict[str, ModuleType] = {}


@pytest.fixture(scope="session")
def collector_module(tmp_path_factory) -> ModuleType:
    """The patched collector (shared by every suite that imports this fixture)."""
    if "patched" not in _LOADED:
        _LOADED["patched"] = load_patched_collector(tmp_path_factory.mktemp("patched_collector"))
    return _LOADED["patched"]


@pytest.fixture(scope="session")
def stock_collector_module(tmp_path_factory) -> ModuleType:
    """The pristine executorch 1.5.1 collector (shared likewise)."""
    if "stock" not in _LOADED:
        _LOADED["stock"] = load_stock_collector(tmp_path_factory.mktemp("stock_collector"))
    return _LOADED["stock"]


def decode_manifest(blob: bytes) -> tuple[str, list[dict]]:
    """Decode the ETCUDAFQN3 manifest the CUDA runtime reads (our own reader, for tests)."""
    assert blob.startswith(MANIFEST_MAGIC)
    cursor = len(MANIFEST_MAGIC)

    def take(fmt: str):
        nonlocal cursor
        values = struct.unpack_from(fmt, blob, cursor)
        cursor += struct.calcsize(fmt)
        return values

    def string() -> str:
        nonlocal cursor
        (size,) = take("<I")
        value = blob[cursor : cursor + size].decode()
        cursor += size
        return value

    so_key = string()
    (count,) = take("<I")
    entries = []
    for _ in range(count):
        fqn, storage_key = string(), string()
        nbytes, dtype, device_type, offset, ndim = take("<QiiqI")
        sizes = take(f"<{ndim}q")
        strides = take(f"<{ndim}q")
        entries.append(
            dict(fqn=fqn, storage_key=storage_key, storage_nbytes=nbytes, dtype=dtype,
                 device_type=device_type, storage_offset=offset, sizes=sizes, strides=strides)
        )
    assert cursor == len(blob)
    return so_key, entries


def read_back(data: bytes, dtype: torch.dtype, sizes, strides, storage_offset: int) -> torch.Tensor:
    """The tensor a reader of the manifest rebuilds from the written bytes."""
    flat = (
        torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if data
        else torch.empty(0, dtype=torch.uint8)
    )
    return torch.as_strided(flat.view(dtype), tuple(sizes), tuple(strides), storage_offset)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Exact equality: same dtype, shape and bytes of every element."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True

    def raw(t: torch.Tensor) -> bytes:
        dense = torch.empty(t.shape, dtype=t.dtype).copy_(t)  # fresh row-major strides
        return bytes(dense.reshape(-1).view(torch.uint8).numpy())

    return raw(a) == raw(b)


# -- the loader itself ------------------------------------------------------------------------


def test_patched_collector_calls_the_package(collector_module):
    source = Path(collector_module.__file__).read_text()
    assert SEAM in source
    assert "requires {required_nbytes} bytes" not in source  # the stock checks are gone


def test_stock_collector_is_the_pristine_baseline(stock_collector_module):
    assert _sha256(Path(stock_collector_module.__file__)) == baseline_sha256()
    assert SEAM not in Path(stock_collector_module.__file__).read_text()


def test_patch_applies_to_the_pristine_file_exactly(tmp_path, stock_collector_module):
    target = tmp_path / REPO_PATH
    target.parent.mkdir(parents=True)
    shutil.copyfile(stock_collector_module.__file__, target)
    _git_apply(tmp_path, "--check")
    _git_apply(tmp_path)
    _git_apply(tmp_path, "-R")
    assert _sha256(target) == baseline_sha256()
