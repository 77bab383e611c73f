"""Fixtures of the runtime layer's tests: ExecuTorch's Python runtime with this project's delegate
runtime loaded, and the one KV-step `.pte` (an aliased KV cache and a copy-back step counter:
2 heads, 6 positions, 8 features) that the delegate and hostile-blob tests load."""
import pytest

import runtime_helpers as H
from torch_tensorrt_ext import runtime_lib


@pytest.fixture(scope="module")
def runtime():
    runtime_lib.load()
    from executorch.runtime import Runtime
    return Runtime.get()


@pytest.fixture(scope="module")
def kv_pte():
    spec = H.kv_step_spec(heads=2, s_max=6, hidden=8)
    args = {k: spec.inputs[k] for k in ("tok", "pos", "cache", "step")}
    return H.delegated_pte(H.KvStepOuter(), args, spec)
