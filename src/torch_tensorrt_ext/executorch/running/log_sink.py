"""ExecuTorch's C++ log lines go to file descriptor 2, never through Python's `sys.stderr`.

Why: executorch 1.5.1's pybind extension (`extension/pybindings/pybindings.cpp`, compiled into
`executorch/extension/pybindings/_C*.so`) registers a PAL log emitter that writes each log line
to `std::cerr`, and wraps every binding in `py::scoped_estream_redirect`, which turns what is
written to `std::cerr` into Python `str` objects for `sys.stderr.write`. ExecuTorch logs bytes
taken from the file it loads (`Program identifier '%.4s' != expected 'ET12'`, operator names,
backend ids); when they are not UTF-8, pybind11 cannot build the `str`, throws
`error_already_set(UnicodeDecodeError)` where no one can catch it, and the process dies with
`std::terminate` (exit 134). That code is compiled C++; it cannot be patched in site-packages.

Invariant: after `route_logs_to_fd2()` returns, the process-wide PAL log emitter is not the
pybind extension's: if it was, it is replaced by the runtime library's (`tte_runtime_emit_log`,
`fprintf(stderr, ...)` on the C stream; informational lines such as ExecuTorch's cpuinfo probing
only with `$TTE_VERBOSE` set or `runtime_lib.log_info(True)`), or, without the runtime library,
by ExecuTorch's own default emitter (`et_pal_emit_log_message` in libexecutorch.so), so log
lines still appear on the terminal but no byte of them passes through Python. An emitter that
someone else registered is left alone. Idempotent; on an ExecuTorch build without these symbols
it changes nothing and warns (`routed()` is False). Cost: in Jupyter, ExecuTorch's log lines go
to the kernel's stderr instead of the notebook.
"""
from __future__ import annotations

import ctypes
import os
import threading
import warnings
from pathlib import Path

__all__ = ["route_logs_to_fd2", "routed", "current_emitter_library"]

_GET_PAL_IMPL = "_ZN10executorch7runtime12get_pal_implEv"  # executorch::runtime::get_pal_impl()
_DEFAULT_EMITTER = "et_pal_emit_log_message"
_PYBIND_EXTENSION = "extension/pybindings/_C"
_lock = threading.Lock()
_routed = False


class _PalImpl(ctypes.Structure):
    # executorch/runtime/platform/platform.h `struct PalImpl`: seven function pointers, then
    # the registering source file name.
    _fields_ = [("init", ctypes.c_void_p), ("abort", ctypes.c_void_p),
                ("current_ticks", ctypes.c_void_p), ("ticks_to_ns_multiplier", ctypes.c_void_p),
                ("emit_log_message", ctypes.c_void_p), ("allocate", ctypes.c_void_p),
                ("free", ctypes.c_void_p), ("source_filename", ctypes.c_char_p)]


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _libexecutorch() -> ctypes.CDLL | None:
    from executorch.extension.pybindings import _C  # executorch/extension/pybindings/_C*.so
    path = Path(_C.__file__).resolve().parents[2] / "lib" / "libexecutorch.so"
    if not path.is_file():
        return None
    # Already mapped by the pybind extension; RTLD_NOLOAD keeps this from loading a second copy.
    try:
        return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL | getattr(ctypes, "RTLD_NOLOAD", 4))
    except OSError:
        return None


def _pal_table() -> tuple | None:
    lib = _libexecutorch()
    if lib is None or not hasattr(lib, _GET_PAL_IMPL) or not hasattr(lib, _DEFAULT_EMITTER):
        return None
    get = getattr(lib, _GET_PAL_IMPL)
    get.restype = ctypes.POINTER(_PalImpl)
    get.argtypes = []
    default = ctypes.cast(getattr(lib, _DEFAULT_EMITTER), ctypes.c_void_p).value
    return get().contents, default


def _library_of(address: int | None) -> str:
    if not address:
        return ""
    info = _DlInfo()
    libc = ctypes.CDLL(None)
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    if not libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
        return ""
    return os.path.realpath(info.dli_fname.decode("utf-8", "replace"))


def current_emitter_library() -> str:
    """Path of the shared object whose function emits ExecuTorch's log lines ("" if unknown)."""
    table = _pal_table()
    return _library_of(table[0].emit_log_message) if table else ""


def route_logs_to_fd2() -> bool:
    """Replace the pybind extension's log emitter by ExecuTorch's default one (see module doc).

    Imports ExecuTorch's Python runtime first (that import registers the pybind emitter).
    Returns whether log lines now bypass Python."""
    global _routed
    with _lock:
        if _routed:
            return True
        import executorch.runtime  # noqa: F401  (loads _C, which registers its emitter)
        table = _pal_table()
        if table is None:
            warnings.warn("torch_tensorrt_ext could not find ExecuTorch's PAL table "
                          f"({_GET_PAL_IMPL}, {_DEFAULT_EMITTER} in libexecutorch.so); ExecuTorch "
                          "log lines still pass through Python, and a .pte holding non-UTF-8 "
                          "strings can abort this process", RuntimeWarning, stacklevel=2)
            return False
        pal, default = table
        ours = _runtime_emitter()
        if _PYBIND_EXTENSION in _library_of(pal.emit_log_message) or \
                pal.emit_log_message == default:
            pal.emit_log_message = ours or default
        _routed = _library_of(pal.emit_log_message) != "" and \
            _PYBIND_EXTENSION not in _library_of(pal.emit_log_message)
        return _routed


def _runtime_emitter() -> int | None:
    """The runtime library's emitter, when that library is loaded in this process."""
    from ... import runtime_lib
    lib = runtime_lib.loaded()
    if lib is None:
        return None
    lib.tte_runtime_log_info(1 if os.environ.get("TTE_VERBOSE") else 0)
    return ctypes.cast(lib.tte_runtime_emit_log, ctypes.c_void_p).value


def routed() -> bool:
    return _routed
