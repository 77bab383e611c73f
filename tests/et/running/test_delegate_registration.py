"""Importing `torch_tensorrt_ext.executorch` (or the patched
`torch_tensorrt.executorch`, patch 0010) registers the delegate with ExecuTorch's runtime in that
process, as ExecuTorch's own backends do at import; without the runtime library the import is an
ImportError naming the file.

Each check runs in a fresh interpreter: in this one some other test loaded the library already.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

import torch_tensorrt_ext as tte
from torch_tensorrt_ext import runtime_lib
from torch_tensorrt_ext.demo.models import Decoder

_PROBE = """
import json, sys
from executorch.runtime import Runtime
registry = Runtime.get().backend_registry
before = registry.is_available("TensorRTBackend")
__import__(sys.argv[1])
from executorch.extension.pybindings import portable_lib
print(json.dumps([before, registry.is_available("TensorRTBackend"),
                  "tte::kv_cache_update.out" in portable_lib._get_operator_names()]))
"""


_RUNTIME_API = """
import sys, torch
import torch_tensorrt_ext.executorch  # noqa: F401
from executorch.runtime import Runtime
method = Runtime.get().load_program(sys.argv[1]).load_method("forward")
torch.save([method.execute(list(a))[0] for a in torch.load(sys.argv[2])], sys.argv[3])
"""


def _python(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_importing_the_package_registers_the_backend_and_its_kernel():
    done = _python(_PROBE, "torch_tensorrt_ext.executorch")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [False, True, True]


def test_importing_the_patched_torch_tensorrt_executorch_registers_them_too():
    from rtx_env import torch_tensorrt_or_skip
    torch_tensorrt_or_skip()
    done = _python(_PROBE, "torch_tensorrt.executorch")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [False, True, True]


def test_a_missing_runtime_library_is_an_import_error_naming_the_file(tmp_path):
    missing = tmp_path / "nope" / runtime_lib.LIB_NAME
    code = ("import json\ntry:\n    import torch_tensorrt_ext.executorch\n"
            "except ImportError as e:\n"
            "    print(json.dumps([type(e).__name__, str(e), e.path, e.name]))\n")
    done = _python(code, env={runtime_lib.ENV_VAR: str(missing)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [
        "RuntimeLibraryImportError",
        "import torch_tensorrt_ext.executorch: it registers ExecuTorch's TensorRTBackend delegate "
        "from torch-tensorrt-ext's runtime library, but the torch-tensorrt-ext runtime library "
        f"is missing at {missing} (from $TTE_RUNTIME_LIB); run `bash scripts/setup.sh` (or "
        "`bash scripts/build_runtime.sh`) to build it",
        str(missing), "torch_tensorrt_ext.executorch"]


def test_executorchs_runtime_api_steps_a_saved_program_like_eager(tmp_path):
    """ExecuTorch's own Python `Runtime` over a `.pte` of this project, after the import only."""
    torch.manual_seed(0)
    model = Decoder(layers=2).eval()
    steps = [(torch.randn(1, 1, 16, generator=torch.Generator().manual_seed(s)),
              torch.tensor([s])) for s in range(3)]
    with torch.no_grad():
        want = [model(*a) for a in steps]   # buffers start from the initial values the .pte holds
    torch.manual_seed(0)
    tte.reference.export(Decoder(layers=2).eval(), steps[0], str(tmp_path / "d.pte"))
    torch.save(steps, tmp_path / "in.pt")
    done = _python(_RUNTIME_API, str(tmp_path / "d.pte"), str(tmp_path / "in.pt"),
                   str(tmp_path / "out.pt"))
    assert done.returncode == 0, done.stderr
    for s, got in enumerate(torch.load(tmp_path / "out.pt")):
        torch.testing.assert_close(got, want[s], msg=lambda m: f"step {s}: {m}")
