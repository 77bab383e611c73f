"""GPU tier: our KV predictions against what real TensorRT engines alias (torch-tensorrt 2.14.0).

Runs only on a GPU runner with CUDA, TensorRT and torch-tensorrt importable (`pytest -m gpu`);
where TensorRT is not, the module skips naming what is missing (`gpu_env.tensorrt_or_skip`). It
has never run in this project's CI (no machine here has TensorRT).
"""
from __future__ import annotations

import copy

import pytest
from gpu_env import tensorrt_or_skip

pytestmark = pytest.mark.gpu
TORCH_TENSORRT = tensorrt_or_skip()

import torch  # noqa: E402

import torch_tensorrt_ext as tte  # noqa: E402
from plan_models import Stateful  # noqa: E402


def _torch_tensorrt():
    return TORCH_TENSORRT


def _kv_and_strided(m, x, p):
    m.k.index_copy_(2, p, x)
    m.s[:, :, 0:8:2, :] = m.s[:, :, 0:8:2, :] + 1
    return (m.k * 2).sum(dim=2) + m.s.sum()


def _engine_infos(compiled):
    from torch_tensorrt.dynamo.runtime import TorchTensorRTModule
    from torch_tensorrt_ext.engines.tensorrt_info import engine_info_from_serialized
    infos = []
    for name, mod in compiled.named_modules():
        if isinstance(mod, TorchTensorRTModule):
            infos.append(engine_info_from_serialized(mod._pack_engine_info(), name=name))
    return infos


def test_kv_prediction_matches_tensorrt_aliasing():
    torch_tensorrt = _torch_tensorrt()
    model = Stateful(_kv_and_strided, k=(1, 2, 16, 8), s=(1, 2, 8, 4)).eval().cuda()
    args = (torch.randn(1, 2, 1, 8, device="cuda"), torch.tensor([3], device="cuda"))
    ep = torch.export.export(copy.deepcopy(model), args)
    plan = tte.plan_mutations(ep)
    assert plan["k"].kind is tte.WriteKind.KV_ALIAS
    assert plan["s"].kind is tte.WriteKind.COPY_BACK and "strided" in plan["s"].reason
    compiled = torch_tensorrt.dynamo.compile(ep, inputs=list(args), min_block_size=1)
    infos = _engine_infos(compiled)
    assert infos, "torch_tensorrt built no TensorRT engine"
    aliased_inputs = {a.input for e in infos for a in e.aliased_io}
    assert any(name.endswith("k") for name in aliased_inputs), aliased_inputs
    assert not any(name.endswith("_s") or name == "s" for name in aliased_inputs), aliased_inputs
    # reconcile with the engines' own report: the KV write stays KV
    named = []
    for e in infos:
        bufs = tuple((i, "k") for i in e.input_names if i.endswith("k"))
        named.append(tte.EngineInfo(**{**e.__dict__, "input_buffers": bufs}))
    assert tte.reconcile(plan, named)["k"].kind is tte.WriteKind.KV_ALIAS


def test_tensorrt_kv_cache_persists_like_eager():
    torch_tensorrt = _torch_tensorrt()

    def kv_only(m, x, p):
        m.k.index_copy_(2, p, x)
        return (m.k * 2).sum(dim=2)
    model = Stateful(kv_only, k=(1, 2, 16, 8)).eval().cuda()
    eager = copy.deepcopy(model)
    args = (torch.randn(1, 2, 1, 8, device="cuda"), torch.tensor([0], device="cuda"))
    compiled = torch_tensorrt.dynamo.compile(torch.export.export(copy.deepcopy(model), args),
                                             inputs=list(args), min_block_size=1)
    for step in range(8):
        a = (torch.randn(1, 2, 1, 8, device="cuda"), torch.tensor([step], device="cuda"))
        torch.testing.assert_close(compiled(*a), eager(*a), rtol=1e-3, atol=1e-3)
