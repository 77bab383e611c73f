"""Loading the C++ delegate runtime (libtte_runtime.so) into this process.

Where it is found (`library_path()`): $TTE_RUNTIME_LIB when set (that file only); else the copy
shipped in the package, torch_tensorrt_ext/_lib/lib/libtte_runtime.so (found with
importlib.resources: a wheel's build compiles and installs it there, and in a checkout
`scripts/build_runtime.sh` does), then, in a source checkout, build/runtime/libtte_runtime.so. In a
checkout a build-tree library newer than the package's copy by a whole second wins (it was rebuilt
without the install step; CMake's install keeps the build's time to the second); none found is an
error listing every place searched.

Invariant: after `load()` returns, ExecuTorch's Python runtime in this process resolves the
backend "TensorRTBackend" and the kernel `tte::kv_cache_update.out` to this project's runtime:
executorch's runtime (and with it the shared libexecutorch.so registry) is imported first, then
the library is opened once with RTLD_GLOBAL so its static registrations land in that registry.
`load()` is idempotent; a missing library is an error naming the path and the fix (an
ImportError from `register_delegate`, which importing `torch_tensorrt_ext.executorch` calls). The
counter wrappers read the process-wide counters of CONTRACTS.md §4; `last_refusal()` is the calling
thread's last delegate refusal (its reason and the delegate it names) and `last_check()` its
stable check id (CONTRACTS.md §1 "Check ids"), `check_blob()` the C++ reader's verdict on a blob
(recorded as the thread's last refusal too; the differential tests compare it, check id for check
id, with python's blob.parse).
"""
from __future__ import annotations

import ctypes
import importlib.resources
import os
import threading
from pathlib import Path

from .errors import ExecutionError, TteError

__all__ = ["library_path", "search_path", "runner_path", "load", "copy_bytes",
           "copy_bytes_by_path", "execute_count",
           "reset_counters",
           "version", "last_refusal", "last_check", "clear_last_refusal", "refusal_error",
           "blob_writes", "check_blob", "use_device", "device_name", "TteValue", "loaded",
           "log_info", "RuntimeLibraryError", "RuntimeLibraryImportError", "DelegateRefusedError",
           "register_delegate"]

ENV_VAR = "TTE_RUNTIME_LIB"
LIB_NAME = "libtte_runtime.so"
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


class RuntimeLibraryError(TteError, RuntimeError):
    """The runtime library is missing or cannot be loaded."""


class RuntimeLibraryImportError(RuntimeLibraryError, TteError, ImportError):
    """Importing a module that registers the delegate (`torch_tensorrt_ext.executorch`) found no
    runtime library to register it from; `path` is the file looked for (None when no place
    searched holds one)."""


class DelegateRefusedError(TteError, RuntimeError):
    """A TensorRTBackend delegate refused to load or run; the message carries ExecuTorch's error,
    then the runtime's reason and the delegate it names."""


def _package_copy() -> Path:
    return Path(str(importlib.resources.files("torch_tensorrt_ext") / "_lib" / "lib" / LIB_NAME))


def _checkout_build() -> Path | None:
    # src/torch_tensorrt_ext/runtime_lib.py -> the repository root, in a checkout only
    root = Path(__file__).resolve().parents[2]
    if not (root / "runtime" / "CMakeLists.txt").is_file():
        return None
    return root / "build" / "runtime" / LIB_NAME


def search_path() -> list[Path]:
    """Where `library_path()` looks when $TTE_RUNTIME_LIB is unset, in order."""
    build = _checkout_build()
    return [_package_copy()] + ([build] if build is not None else [])


def library_path() -> Path:
    """$TTE_RUNTIME_LIB if set; else the first library of `search_path()` that exists, except that
    a later one newer by a whole second wins (a checkout rebuilt without installing into the
    package)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    places = search_path()
    return _first_or_newer(places) or _missing(RuntimeLibraryError(
        f"the torch-tensorrt-ext runtime library is not installed: searched "
        f"{', '.join(str(p) for p in places)}; in a checkout run "
        f"`bash scripts/build_runtime.sh` (it builds the library and installs it into the "
        f"package), else set ${ENV_VAR} to a {LIB_NAME}"))


def _first_or_newer(places: list[Path]) -> Path | None:
    """The first of `places` that exists, unless a later one is newer by a whole second (a
    checkout rebuilt without installing into the package); None when none exists."""
    found = [p for p in places if p.is_file()]
    if not found:
        return None
    best = found[0]
    for later in found[1:]:
        if int(later.stat().st_mtime) > int(best.stat().st_mtime):
            best = later
    return best


def _missing(error: Exception) -> Path:
    raise error


RUNNER_ENV_VAR = "TTE_RUN"
RUNNER_NAME = "tte_run"


def runner_path() -> Path:
    """The C++ runner `tte_run` (runtime/tools/tte_run.cpp: a `.pte` stepped through ExecuTorch's
    Module API with this runtime's device): $TTE_RUN if set; else the package's copy
    (_lib/bin), then a checkout's build tree, the newer by a whole second winning as for the
    library. None found is an error naming every place searched."""
    env = os.environ.get(RUNNER_ENV_VAR)
    if env:
        return Path(env)
    places = [_package_copy().parent.parent / "bin" / RUNNER_NAME]
    build = _checkout_build()
    if build is not None:
        places.append(build.parent / RUNNER_NAME)
    return _first_or_newer(places) or _missing(RuntimeLibraryError(
        f"the runner {RUNNER_NAME} is not built: searched {', '.join(map(str, places))}; "
        f"in a checkout run `bash scripts/build_runtime.sh`, else set ${RUNNER_ENV_VAR}"))


def _import_executorch_runtime() -> None:
    # The Python runtime's extension links libexecutorch.so; importing it first makes the
    # library below bind to that same registry instead of loading a private copy.
    try:
        import executorch.runtime  # noqa: F401
    except ImportError:
        from executorch.extension.pybindings import portable_lib  # noqa: F401


def load() -> ctypes.CDLL:
    """Load the runtime library once (idempotent) and return it."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = library_path()
        if not path.is_file():
            where = f"${ENV_VAR}" if os.environ.get(ENV_VAR) else "the search path"
            raise RuntimeLibraryError(
                f"the torch-tensorrt-ext runtime library is missing at {path} (from {where}); "
                f"run `bash scripts/setup.sh` (or `bash scripts/build_runtime.sh`) to build it")
        _import_executorch_runtime()
        try:
            lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise RuntimeLibraryError(
                f"cannot load the torch-tensorrt-ext runtime library {path}: {e}; rebuild it with "
                f"`bash scripts/build_runtime.sh`") from None
        lib.tte_runtime_copy_bytes.restype = ctypes.c_uint64
        lib.tte_runtime_copy_bytes.argtypes = [ctypes.c_char_p]
        lib.tte_runtime_copy_bytes_by_path.restype = ctypes.c_uint64
        lib.tte_runtime_copy_bytes_by_path.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.tte_runtime_execute_count.restype = ctypes.c_uint64
        lib.tte_runtime_execute_count.argtypes = []
        lib.tte_runtime_reset_counters.restype = None
        lib.tte_runtime_reset_counters.argtypes = []
        lib.tte_runtime_version.restype = ctypes.c_char_p
        lib.tte_runtime_version.argtypes = []
        lib.tte_runtime_last_refusal.restype = ctypes.c_char_p
        lib.tte_runtime_last_refusal.argtypes = []
        lib.tte_runtime_last_check.restype = ctypes.c_char_p
        lib.tte_runtime_last_check.argtypes = []
        lib.tte_runtime_clear_last_refusal.restype = None
        lib.tte_runtime_clear_last_refusal.argtypes = []
        lib.tte_runtime_check_blob.restype = ctypes.c_int
        lib.tte_runtime_check_blob.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                               ctypes.c_size_t]
        lib.tte_runtime_blob_writes.restype = ctypes.c_int
        lib.tte_runtime_blob_writes.argtypes = [ctypes.c_char_p, ctypes.c_size_t,
                                                ctypes.c_char_p, ctypes.c_size_t]
        _declare_programs(lib)
        _lib = lib
        return lib


class TteValue(ctypes.Structure):
    """`tte_value` of tte/c_api.h: one value in or out of a method (kind 0 tensor, 1 int,
    2 double, 3 bool, 4 none; dtype an ExecuTorch ScalarType code)."""

    _fields_ = [("kind", ctypes.c_int32), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("sizes", ctypes.c_int64 * 16), ("data", ctypes.c_void_p),
                ("nbytes", ctypes.c_size_t), ("i", ctypes.c_int64), ("d", ctypes.c_double)]


def _declare_programs(lib: ctypes.CDLL) -> None:
    c = ctypes
    why = [c.c_char_p, c.c_size_t]
    lib.tte_program_open.restype = c.c_void_p
    lib.tte_program_open.argtypes = [c.c_char_p, c.POINTER(c.c_int), *why]
    lib.tte_program_open_with_data.restype = c.c_void_p
    lib.tte_program_open_with_data.argtypes = [c.c_char_p, c.c_char_p, c.POINTER(c.c_int), *why]
    lib.tte_program_close.restype = None
    lib.tte_program_close.argtypes = [c.c_void_p]
    lib.tte_program_method_count.restype = c.c_size_t
    lib.tte_program_method_count.argtypes = [c.c_void_p]
    lib.tte_program_method_name.restype = c.c_char_p
    lib.tte_program_method_name.argtypes = [c.c_void_p, c.c_size_t]
    lib.tte_program_execute.restype = c.c_int
    lib.tte_program_execute.argtypes = [c.c_void_p, c.c_char_p, c.POINTER(TteValue), c.c_size_t,
                                        c.POINTER(c.c_size_t), *why]
    lib.tte_program_output.restype = c.c_int
    lib.tte_program_output.argtypes = [c.c_void_p, c.c_char_p, c.c_size_t, c.POINTER(TteValue)]
    lib.tte_program_buffer_count.restype = c.c_size_t
    lib.tte_program_buffer_count.argtypes = [c.c_void_p, c.c_char_p]
    lib.tte_program_buffer.restype = c.c_int
    lib.tte_program_buffer.argtypes = [c.c_void_p, c.c_char_p, c.c_size_t,
                                       c.POINTER(c.c_char_p), c.POINTER(TteValue)]
    lib.tte_program_copy_bytes.restype = c.c_uint64
    lib.tte_program_copy_bytes.argtypes = [c.c_void_p, c.c_char_p, c.c_char_p, c.c_int]
    lib.tte_program_reset.restype = c.c_int
    lib.tte_program_reset.argtypes = [c.c_void_p, *why]
    lib.tte_program_notice.restype = c.c_char_p
    lib.tte_program_notice.argtypes = [c.c_void_p]
    lib.tte_runtime_copy.restype = c.c_int
    lib.tte_runtime_copy.argtypes = [c.c_void_p, c.c_void_p, c.c_size_t]
    lib.tte_runtime_use_device.restype = c.c_int
    lib.tte_runtime_use_device.argtypes = [c.c_char_p, *why]
    lib.tte_runtime_device_name.restype = c.c_char_p
    lib.tte_runtime_device_name.argtypes = []
    lib.tte_runtime_log_info.restype = None
    lib.tte_runtime_log_info.argtypes = [c.c_int]


def register_delegate(importer: str) -> None:
    """`load()` for a module whose import registers the delegate with ExecuTorch's runtime
    (`importer`, named in the error): a missing or unloadable library is a
    `RuntimeLibraryImportError` (an ImportError) naming the file and how to build it."""
    try:
        load()
    except RuntimeLibraryError as e:
        try:
            path: str | None = str(library_path())
        except RuntimeLibraryError:
            path = None
        err = RuntimeLibraryImportError(
            f"import {importer}: it registers ExecuTorch's TensorRTBackend delegate from "
            f"torch-tensorrt-ext's runtime library, but {e}")
        err.name, err.path = importer, path
        raise err from None


def loaded() -> ctypes.CDLL | None:
    """The runtime library if this process loaded it already (never loads it)."""
    return _lib


def log_info(enabled: bool) -> None:
    """Show ExecuTorch's informational log lines (cpuinfo probing, ...) or not (the default:
    errors only); what the commands' --verbose turns on."""
    load().tte_runtime_log_info(1 if enabled else 0)


def use_device(kind: str) -> None:
    """Choose this process's device once, before loading a program whose state lives on it:
    "cuda", "emulated" (device memory the host cannot touch: CPU CI), "auto" or "none"
    (tte/device.h). Raises DelegateRefusedError with the reason when it cannot be in force."""
    why = ctypes.create_string_buffer(1024)
    code = load().tte_runtime_use_device(kind.encode(), why, len(why))
    if code:
        raise DelegateRefusedError(f"device {kind!r}: {why.value.decode('utf-8', 'replace')}")


def device_name() -> str:
    """The device in force ("cuda:0", "emulated"), or ""."""
    return load().tte_runtime_device_name().decode()


def copy_bytes(fqn: str) -> int:
    """Bytes the runtime copied for buffer `fqn` since the last reset (all delegates)."""
    return int(load().tte_runtime_copy_bytes(fqn.encode("utf-8")))


COPY_PATHS = ("device", "link", "host")   # tte_runtime_copy_bytes_by_path's path codes, in order


def copy_bytes_by_path(fqn: str) -> dict:
    """`copy_bytes(fqn)` split by where the bytes went: "device" (within device memory), "link"
    (host <-> device: PCIe on a GPU), "host" (within host memory)."""
    lib = load()
    return {p: int(lib.tte_runtime_copy_bytes_by_path(fqn.encode("utf-8"), i))
            for i, p in enumerate(COPY_PATHS)}


def execute_count() -> int:
    """Delegate `execute` calls since the last reset (all delegates)."""
    return int(load().tte_runtime_execute_count())


def reset_counters() -> None:
    load().tte_runtime_reset_counters()


def version() -> str:
    """E.g. "tte-runtime 0.1 (engines: reference)"."""
    return load().tte_runtime_version().decode("utf-8")


def compiled_engines() -> str:
    """The engine kinds this runtime was built with, e.g. "reference" or "reference,tensorrt"."""
    return version().split("(engines: ", 1)[1].rstrip(")")


def last_refusal() -> str:
    """The last TensorRTBackend refusal (init or execute) on this thread; "" when none since
    `clear_last_refusal()`."""
    return load().tte_runtime_last_refusal().decode("utf-8", "replace")


def last_check() -> str:
    """The check id of that refusal (e.g. "json.duplicate_key", "execute.nbytes"); "" when none
    since `clear_last_refusal()`."""
    return load().tte_runtime_last_check().decode("ascii")


def clear_last_refusal() -> None:
    load().tte_runtime_clear_last_refusal()


def check_blob(data: bytes) -> tuple[int, str]:
    """The C++ reader on a delegate blob (parse, integrity, validation, binding plan): (0, "")
    when accepted, else (ExecuTorch error code, reason); `last_check()` then names the check."""
    why = ctypes.create_string_buffer(4096)
    code = load().tte_runtime_check_blob(bytes(data), len(data), why, len(why))
    return int(code), why.value.decode("utf-8", "replace")


def blob_writes(data: bytes) -> tuple[int, str]:
    """The writes the runtime's own binding plan of a delegate blob makes per call: (0, one line
    per write "<input binding>\t<buffer fqn>\t<in_place|copy>\t<output binding>") when the
    runtime accepts the blob, else (ExecuTorch error code, reason)."""
    out = ctypes.create_string_buffer(1 << 16)
    code = load().tte_runtime_blob_writes(bytes(data), len(data), out, len(out))
    return int(code), out.value.decode("utf-8", "replace")


def refusal_error(what: str) -> TteError:
    """The error of a failed load or call whose ExecuTorch message is `what` ("Failed to load
    method forward, error: 0x23"): a DelegateRefusedError with this thread's last delegate
    refusal appended when a delegate refused, else an ExecutionError of `what` — a TteError
    either way (both are RuntimeErrors too)."""
    reason = last_refusal()
    if not reason:
        return ExecutionError(what)
    return DelegateRefusedError(f"{what}: {reason}")
