"""What a TensorRT delegate blob says about its engine, and what a runtime does with it:
the SDK that built it (`engine_kind`: `tensorrt_rtx` here, where torch-tensorrt-rtx builds the
engines), refused by a runtime built without that SDK naming the kind and how to build with it;
and `torch_tensorrt.save`'s `weight_streaming_budget_per_engine`, carried to the engine's init.
The engine-level logic (aliasing verified against the engine, the budget set before the context)
is unit-tested in C++ with a fake SDK (runtime/tests/test_tensorrt_engine.cpp); no TensorRT or
TensorRT-RTX engine runs here."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from plan_models import DecayingState
from rtx_env import built_engine_kind, save_rtx_pte
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


ARGS = (torch.randn(1, 8),)


def test_the_blob_names_the_sdk_and_carries_the_weight_streaming_budget(tmp_path):
    save_rtx_pte(DecayingState(8), ARGS, tmp_path / "budget.pte",
                 weight_streaming_budget_per_engine=1 << 20)
    save_rtx_pte(DecayingState(8), ARGS, tmp_path / "auto.pte")
    (with_budget,) = inspect_pte((tmp_path / "budget.pte").read_bytes()).method("forward").delegates
    (auto,) = inspect_pte((tmp_path / "auto.pte").read_bytes()).method("forward").delegates
    assert (with_budget.engine_kind, with_budget.weight_streaming_budget) == \
        (built_engine_kind(), 1 << 20)
    assert auto.weight_streaming_budget is None   # TensorRT's own budget


_LOAD = """
import sys
from torch_tensorrt_ext import runtime_lib
runtime_lib.use_device("emulated")   # the program's state lives on cuda:0
import torch_tensorrt_ext as tte
try:
    tte.executorch.load(sys.argv[1])
except Exception as e:
    print(type(e).__name__ + ": " + str(e))
"""


def test_a_runtime_without_the_sdk_refuses_the_blob_naming_its_kind(tmp_path):
    from torch_tensorrt_ext import runtime_lib
    kind = built_engine_kind()
    if kind in runtime_lib.compiled_engines().split(","):
        pytest.skip(f"this runtime was built with {kind}: it would run the engine")
    save_rtx_pte(DecayingState(8), ARGS, tmp_path / "m.pte")
    done = subprocess.run([sys.executable, "-c", _LOAD, str(tmp_path / "m.pte")],
                          capture_output=True, text=True, timeout=300)
    sdk = {"tensorrt_rtx": "TensorRT-RTX", "tensorrt": "TensorRT"}[kind]
    how = ("the TensorRT-RTX SDK (TENSORRT_RTX_ROOT=<its folder> scripts/build_runtime.sh)"
           if kind == "tensorrt_rtx" else "TensorRT found (TENSORRT_ROOT)")
    assert (f"DelegateRefusedError: Failed to load method forward, error: 0x10: TensorRTBackend: "
            f"init refused the delegate blob: TR03 blob holds a {sdk} engine, but this runtime "
            f"was built without {sdk} (engines: {runtime_lib.compiled_engines()}); rebuild with "
            f"{how} or export with the reference engine") in done.stdout, done.stdout + done.stderr
