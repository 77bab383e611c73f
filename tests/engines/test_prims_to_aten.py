"""The reference engine's rewrite of the prims calls Torch-TensorRT's decompositions leave in a
partition (`engines.prims_to_aten`): each rewritten call computes what the prim computes, and a
train-mode BatchNorm (issue 45 class 1, refused before: ExecuTorch's `to_edge` refused
`prims::broadcast_in_dim`) compiles, saves and runs like eager."""
from __future__ import annotations

import pytest
import torch
from plan_models import AdaptingBatchNorm
from stateful_check import ModuleProgram, check_program
from torch.fx.experimental.proxy_tensor import make_fx

from torch_tensorrt_ext.engines.prims_to_aten import prims_to_aten

prims = torch.ops.prims
CASES = {
    "broadcast_in_dim": (lambda a, b: prims.broadcast_in_dim(a, [2, 3, 4], [1]) + b,
                         (torch.randn(3), torch.randn(2, 3, 4))),
    "div_float": (lambda a, b: prims.div(a, b), (torch.randn(5), torch.rand(5) + 0.5)),
    "div_int": (lambda a, b: prims.div(a, b),
                (torch.tensor([7, -7, 9, -9]), torch.tensor([2, 2, -4, -4]))),
    "squeeze": (lambda a, b: prims.squeeze(a, [0, 2]) * b, (torch.randn(1, 3, 1), torch.randn(3))),
    "convert_element_type": (lambda a, b: prims.convert_element_type(a, torch.int32) + b,
                             (torch.randn(4) * 9, torch.ones(4, dtype=torch.int32))),
    "sum": (lambda a, b: prims.sum(a, [0]) + b, (torch.randn(3, 4), torch.randn(4))),
    "var": (lambda a, b: prims.var(a, [1], 1.0) + b, (torch.randn(3, 4), torch.randn(3))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_rewritten_prim_computes_what_the_prim_computes(name):
    fn, args = CASES[name]
    gm = make_fx(fn, tracing_mode="fake")(*args)
    assert any(n.op == "call_function" and n.target.namespace == "prims"
               for n in gm.graph.nodes)
    prims_to_aten(gm)
    assert not [n for n in gm.graph.nodes if n.op == "call_function"
                and n.target.namespace == "prims"]
    got, want = gm(*args), fn(*args)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.emulated_device
def test_train_mode_batchnorm_statistics_compile_save_and_run_like_eager():
    program = ModuleProgram(AdaptingBatchNorm, AdaptingBatchNorm.args, AdaptingBatchNorm.written)
    result = check_program(program, steps=3)
    assert result.ok, result.report(program)
