"""runtime_lib: the C++ runtime loads into the Python process and registers into ExecuTorch's
shared registries; its C API answers through the ctypes wrappers."""
import ctypes

import pytest

from helpers import REPO
from torch_tensorrt_ext import runtime_lib


def test_library_path_searches_package_then_build_tree_and_honours_env(monkeypatch):
    monkeypatch.delenv(runtime_lib.ENV_VAR, raising=False)
    root = REPO
    assert runtime_lib.search_path() == [
        root / "src" / "torch_tensorrt_ext" / "_lib" / "lib" / "libtte_runtime.so",
        root / "build" / "runtime" / "libtte_runtime.so"]
    assert runtime_lib.library_path() in runtime_lib.search_path()
    monkeypatch.setenv(runtime_lib.ENV_VAR, "/opt/x/libtte_runtime.so")
    assert str(runtime_lib.library_path()) == "/opt/x/libtte_runtime.so"


def test_missing_library_names_path_and_fix(monkeypatch, tmp_path):
    missing = tmp_path / "nope" / "libtte_runtime.so"
    monkeypatch.setenv(runtime_lib.ENV_VAR, str(missing))
    monkeypatch.setattr(runtime_lib, "_lib", None)
    with pytest.raises(runtime_lib.RuntimeLibraryError) as e:
        runtime_lib.load()
    assert str(e.value) == (
        f"the torch-tensorrt-ext runtime library is missing at {missing} (from "
        f"$TTE_RUNTIME_LIB); run `bash scripts/setup.sh` (or `bash scripts/build_runtime.sh`) "
        f"to build it")


def test_load_is_idempotent_and_registers_backend_and_kernel():
    lib = runtime_lib.load()
    assert runtime_lib.load() is lib
    assert runtime_lib.version() == "tte-runtime 0.1 (engines: reference)"
    from executorch.runtime import Runtime
    names = Runtime.get().backend_registry.registered_backend_names
    assert "TensorRTBackend" in names
    from executorch.extension.pybindings import portable_lib
    assert "tte::kv_cache_update.out" in portable_lib._get_operator_names()
    # the library's symbols are global: a second handle by name finds the same C API
    again = ctypes.CDLL(str(runtime_lib.library_path()), mode=ctypes.RTLD_GLOBAL)
    again.tte_runtime_execute_count.restype = ctypes.c_uint64
    assert again.tte_runtime_execute_count() == runtime_lib.execute_count()


def test_counters_reset_and_unknown_buffer_is_zero():
    runtime_lib.reset_counters()
    assert runtime_lib.execute_count() == 0
    assert runtime_lib.copy_bytes("no.such.buffer") == 0


def test_last_check_names_the_refusing_check_beside_the_refusal():
    runtime_lib.clear_last_refusal()
    assert (runtime_lib.last_refusal(), runtime_lib.last_check()) == ("", "")
    code, why = runtime_lib.check_blob(b"TR03")
    assert code != 0 and why == "blob is 4 bytes, shorter than its 32-byte header"
    assert (runtime_lib.last_refusal(), runtime_lib.last_check()) == (why, "blob.short")
    assert runtime_lib.check_blob(b"XXXX" + b"\0" * 28)[0] != 0
    assert runtime_lib.last_check() == "blob.magic"
    runtime_lib.clear_last_refusal()
    assert (runtime_lib.last_refusal(), runtime_lib.last_check()) == ("", "")


def test_a_failed_load_or_call_is_always_a_tte_error():
    """`refusal_error`: a delegate's refusal appended when one was left on this thread
    (DelegateRefusedError), else ExecuTorch's message as an ExecutionError — never a bare
    RuntimeError (both are TteErrors and RuntimeErrors)."""
    from torch_tensorrt_ext.errors import ExecutionError, TteError
    runtime_lib.clear_last_refusal()
    plain = runtime_lib.refusal_error("Failed to load method forward, error: 0x23")
    assert type(plain) is ExecutionError and isinstance(plain, (TteError, RuntimeError))
    assert str(plain) == "Failed to load method forward, error: 0x23"
    code, why = runtime_lib.check_blob(b"TR03" + bytes(60))    # the C++ reader refuses it
    assert code != 0 and runtime_lib.last_refusal()
    refused = runtime_lib.refusal_error("Failed to load method forward, error: 0x23")
    assert type(refused) is runtime_lib.DelegateRefusedError and isinstance(refused, TteError)
    assert str(refused) == ("Failed to load method forward, error: 0x23: "
                            f"{runtime_lib.last_refusal()}")
