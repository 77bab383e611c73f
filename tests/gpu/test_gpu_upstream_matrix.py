"""GPU tier of the upstream matrix: the same models and save cells with real TensorRT engines
that run — `torch_tensorrt.compile`'s module decoded step by step against eager (KV and
copy-back state included), then every save cell checked like the CPU tier.

Runs only on a GPU runner where torch_tensorrt (with this project's series applied) can build
and run engines (`pytest -m gpu`); where it cannot, the module skips naming what is missing
(`gpu_env.tensorrt_or_skip`). It has never run in this project's CI: no machine here can run a
TensorRT or TensorRT-RTX engine.
"""
from __future__ import annotations

import copy

import pytest
from gpu_env import tensorrt_or_skip

pytestmark = pytest.mark.gpu
TORCH_TENSORRT = tensorrt_or_skip()
STEPS = 8

import torch  # noqa: E402
from e2e_models import MODELS  # noqa: E402
from upstream_matrix import (CELLS, SAVE_MODELS, check_pte, declared,  # noqa: E402
                             expected_declarations, nbytes)


def _gpu_torch_tensorrt():
    return TORCH_TENSORRT


def _to(args, device):
    return tuple(a.to(device) for a in args)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_compiled_module_decodes_like_eager(name):
    torch_tensorrt = _gpu_torch_tensorrt()
    factory, args_of, _ = MODELS[name]
    model = factory().eval().cuda()
    eager = copy.deepcopy(model)
    ep = torch.export.export(copy.deepcopy(model), _to(args_of(0), "cuda"))
    trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(_to(args_of(0), "cuda")),
                                 min_block_size=1)
    for step in range(STEPS):
        args = _to(args_of(step), "cuda")
        with torch.no_grad():
            want = eager(*copy.deepcopy(args))
            got = trt(*args)
        torch.testing.assert_close(got, want, msg=lambda m: f"{name} step {step}: {m}")
        for fqn in trt.mutation_plan.fqns:
            torch.testing.assert_close(trt.get_buffer(fqn), eager.get_buffer(fqn),
                                       msg=lambda m: f"{name} step {step} buffer {fqn}: {m}")


@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
@pytest.mark.parametrize("name", SAVE_MODELS)
def test_save_matrix_on_gpu(tmp_path, name, cell):
    torch_tensorrt = _gpu_torch_tensorrt()
    factory, args_of, _ = MODELS[name]
    model = factory().eval().cuda()
    args = _to(args_of(0), "cuda")
    trt = torch_tensorrt.compile(torch.export.export(copy.deepcopy(model), args), ir="dynamo",
                                 arg_inputs=list(args), min_block_size=1)
    path = tmp_path / ("m.pte" if cell.fmt == "executorch" else
                       "m.pt2" if cell.fmt == "aot_inductor" else "m.ep")
    if cell.source == "ep":
        torch_tensorrt.save(torch_tensorrt.dynamo.export(trt, arg_inputs=list(args)), str(path),
                            output_format=cell.fmt)
    else:
        torch_tensorrt.save(trt, str(path), output_format=cell.fmt, arg_inputs=list(args),
                            retrace=cell.retrace, use_legacy_exporter=cell.legacy)
    if cell.fmt == "executorch":
        check_pte(path.read_bytes(), trt.mutation_plan, nbytes(model))
    elif cell.fmt == "exported_program":
        assert declared(torch.export.load(str(path))) == expected_declarations(trt.mutation_plan)
    else:
        assert path.stat().st_size > 0
