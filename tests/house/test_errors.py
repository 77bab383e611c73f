"""One base exception: every error class the package defines is a `TteError` and keeps the
built-in base it had, so code that catches ValueError / RuntimeError / KeyError still does."""
from __future__ import annotations

import ast
import builtins
import importlib
from pathlib import Path

import pytest

import torch_tensorrt_ext
from torch_tensorrt_ext.errors import TteError

# (module, class, the built-in base it keeps)
PUBLIC_ERRORS = [
    ("torch_tensorrt_ext.contracts.plan", "PlanError", ValueError),
    ("torch_tensorrt_ext.contracts.blob", "BlobError", ValueError),
    ("torch_tensorrt_ext.executorch.inspecting.pte_check", "PteError", ValueError),
    ("torch_tensorrt_ext.executorch.saving.pte_write", "DestinationError", ValueError),
    ("torch_tensorrt_ext.executorch.running.program", "NoSuchMethodError", KeyError),
    ("torch_tensorrt_ext.runtime_lib", "RuntimeLibraryError", RuntimeError),
    ("torch_tensorrt_ext.runtime_lib", "RuntimeLibraryImportError", ImportError),
    ("torch_tensorrt_ext.runtime_lib", "DelegateRefusedError", RuntimeError),
    ("torch_tensorrt_ext.engines.tensorrt_info", "TensorRTInfoError", ValueError),
    ("torch_tensorrt_ext.cuda.views", "ViewMetadataError", ValueError),
    ("torch_tensorrt_ext.cuda.weights", "CudaWeightLayoutError", RuntimeError),
    ("torch_tensorrt_ext.demo.pipeline", "EngineUnavailable", ValueError),
    ("torch_tensorrt_ext.demo.run", "DemoArgumentError", ValueError),
    ("torch_tensorrt_ext.seams.device", "NoDeviceError", RuntimeError),
    ("torch_tensorrt_ext.upstream_api", "UpstreamUnavailable", RuntimeError),
    ("torch_tensorrt_ext.patching.errors", "PatchError", Exception),
    ("torch_tensorrt_ext.errors", "UsageError", ValueError),
    ("torch_tensorrt_ext.errors", "ArgumentTypeError", TypeError),
    ("torch_tensorrt_ext.errors", "UnknownName", KeyError),
    ("torch_tensorrt_ext.errors", "Unsupported", NotImplementedError),
    ("torch_tensorrt_ext.errors", "OutOfRange", IndexError),
    ("torch_tensorrt_ext.errors", "ExecutionError", RuntimeError),
]


@pytest.mark.parametrize("module,name,builtin", PUBLIC_ERRORS,
                         ids=[name for _, name, _ in PUBLIC_ERRORS])
def test_each_public_error_is_a_tte_error_and_keeps_its_builtin_base(module, name, builtin):
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, TteError) and issubclass(cls, builtin)
    err = cls("what went wrong")
    with pytest.raises(TteError):
        raise err
    with pytest.raises(builtin):
        raise err


def test_no_error_class_in_the_package_is_left_out():
    """Every class in src/ deriving from a built-in exception also names TteError (read from the
    source, so a new error class in any module, imported here or not, is caught)."""
    builtin_errors = {n for n, v in vars(builtins).items()
                      if isinstance(v, type) and issubclass(v, BaseException)}
    root = Path(torch_tensorrt_ext.__file__).parent
    found, missing = set(), []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or node.name == "TteError":
                continue
            bases = {ast.unparse(b) for b in node.bases}
            if bases & builtin_errors:
                found.add(node.name)
                if "TteError" not in bases:
                    missing.append(f"{path.relative_to(root)}: {node.name}")
    assert missing == []
    assert {name for _, name, _ in PUBLIC_ERRORS} <= found | {"PatchError"}
