"""Which CUDA weight collector the test_cuda_weights* suites exercise, and helpers to read it.

The suites always test executorch's ``backends/cuda/cuda_weight_collector.py`` *with the current
patch*: the installed module when ``torch-tensorrt-ext patch apply`` has installed exactly that,
otherwise a temporary pristine copy patched with ``git apply``. The stock 1.5.1 collector (for
"upstream rejects this" tests) is a temporary pristine copy. The pristine bytes are the installed
file's when it is unpatched, else recovered with ``git apply -R`` or from the record `patch
apply` keeps, and are always checked against the baseline sha256 in ``patches/upstream.toml``.
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
from helpers import REPO

REPO = REPO
PATCH = REPO / "patches/executorch/0001-cuda-accept-AOTInductor-s-compact-clones-of-view-buf.patch"
REPO_PATH = "backends/cuda/cuda_weight_collector.py"
SEAM = "from torch_tensorrt_ext.cuda import "
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
    """``git apply`` the patch under ``root``; ``patch -p1`` where git is missing (GPU runners)."""
    if shutil.which("git"):
        command = ["git", "apply", *flags, str(PATCH)]
    else:
        translated = {"-R": "-R", "--check": "--dry-run"}
        command = ["patch", "-p1", "-s", *(translated[f] for f in flags), "-i", str(PATCH)]
    subprocess.run(command, cwd=root, check=True, capture_output=True, text=True)


def is_patched(path: Path) -> bool:
    return SEAM in path.read_text()


def _recorded_pristine(installed: Path) -> bytes | None:
    """The pristine bytes `torch-tensorrt-ext patch apply` recorded, if it patched this file."""
    try:
        from torch_tensorrt_ext.patching.state import read_state
    except ImportError:
        return None
    site = installed.parents[len(Path(REPO_PATH).parts)]  # .../site-packages
    state = read_state(site)
    for target in getattr(state, "targets", {}).values() if state else ():
        record = target.files.get(REPO_PATH)
        if record is not None:
            return record.pristine
    return None


def pristine_bytes(scratch: Path) -> bytes:
    """executorch 1.5.1's collector, byte for byte, whatever state the installed file is in."""
    installed = installed_collector_file()
    candidates = [installed.read_bytes()]
    if is_patched(installed):
        reverted = scratch / "reverted"
        target = reverted / REPO_PATH
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(installed, target)
        try:
            _git_apply(reverted, "-R")  # patched with this very patch
            candidates.append(target.read_bytes())
        except subprocess.CalledProcessError:
            pass  # patched with an older version of it: see what `patch apply` recorded
        candidates.append(_recorded_pristine(installed) or b"")
    for data in candidates:
        if hashlib.sha256(data).hexdigest() == baseline_sha256():
            return data
    raise AssertionError(
        f"cannot recover pristine executorch 1.5.1 from {installed}: run "
        "`torch-tensorrt-ext patch revert` (or reinstall executorch 1.5.1)"
    )


def _write(root: Path, data: bytes) -> Path:
    target = root / REPO_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def load_patched_collector(root: Path) -> ModuleType:
    """The collector patched with the current patch: the installed module if `patch apply`
    installed exactly that, else a temporary pristine copy patched with ``git apply``."""
    target = _write(root / "patched", pristine_bytes(root))
    _git_apply(root / "patched")
    installed = installed_collector_file()
    if installed.read_bytes() == target.read_bytes():
        import executorch.backends.cuda.cuda_weight_collector as module

        assert Path(module.__file__).resolve() == installed
        return module
    return _load(target, "tte_patched_cuda_weight_collector")


def load_stock_collector(root: Path) -> ModuleType:
    """A temporary copy of the pristine executorch 1.5.1 collector."""
    return _load(_write(root / "stock", pristine_bytes(root)), "tte_stock_cuda_weight_collector")


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


def read_back(
    data: bytes, dtype: torch.dtype, sizes, strides, storage_offset: int, device: str = "cpu"
) -> torch.Tensor:
    """The tensor a reader of the manifest rebuilds from the written bytes (on ``device``, the
    bytes are moved first and viewed there: ``.to(device)`` of the view would compact it)."""
    flat = (
        torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if data
        else torch.empty(0, dtype=torch.uint8)
    )
    flat = flat.to(device)
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
