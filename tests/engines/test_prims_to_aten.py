"""The rewrite of the prims calls Torch-TensorRT's decompositions leave (`engines.prims_to_aten`):
each rewritten call computes what the prim computes, and a train-mode BatchNorm (refused
before: ExecuTorch's `to_edge` refused `prims::broadcast_in_dim`) compiles, saves and
runs like eager — its prims in an engine's partition, or left to PyTorch in the program's host
part (the same rewrite, run by `executorch.saving.prepare`; refused before with `Missing out
variants: {'prims::div'}` / the broadcast_in_dim alias)."""
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


@pytest.mark.emulated_device
@pytest.mark.parametrize("prim", ["div", "broadcast_in_dim"])
def test_train_mode_batchnorm_with_a_prim_left_to_pytorch_runs_like_eager(prim):
    """The prim split off to the host part (`torch_executed_ops`): the saved program's host part
    gets the rewrite too; compiled module and .pte equal eager for 3 steps."""
    program = ModuleProgram(AdaptingBatchNorm, AdaptingBatchNorm.args, AdaptingBatchNorm.written,
                            frozenset({f"torch.ops.prims.{prim}.default"}))
    result = check_program(program, steps=3)
    assert result.ok, result.report(program)


@pytest.mark.emulated_device
def test_train_mode_batchnorm_left_wholly_to_pytorch_saves_outside_no_grad():
    """min_block_size above the model's size: Linear and BatchNorm run in PyTorch, the
    statistics written by host kernels from trainable values. Saved in grad mode (refused
    before: `to_executorch` raised "a leaf Variable that requires grad is being used in an
    in-place operation", as ExecuTorch alone does), and like eager for 3 steps."""
    assert torch.is_grad_enabled()
    program = ModuleProgram(AdaptingBatchNorm, AdaptingBatchNorm.args, AdaptingBatchNorm.written,
                            min_block_size=100)
    result = check_program(program, steps=3)
    assert result.ok, result.report(program)


def test_the_host_part_is_rewritten_on_a_copy_and_a_renamed_output_follows():
    """`prepare.prepare_programs` (a host-only program: the prims rewrite is all it changes):
    the caller's program keeps its prims; in the returned one no prim is left, and an output
    spec naming a replaced node names its replacement."""
    from torch_tensorrt_ext.executorch.saving.prepare import prepare_programs

    class Div(torch.nn.Module):
        def forward(self, a, b):
            return prims.div(a, b)

    ep = torch.export.export(Div(), (torch.randn(4), torch.rand(4) + 0.5))
    out = prepare_programs(ep)
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert targets == [prims.div.default]
    assert [n.target for n in out.graph.nodes if n.op == "call_function"] == \
        [torch.ops.aten.div.Tensor]
    (spec,) = out.graph_signature.output_specs
    assert spec.arg.name == out.graph.output_node().args[0][0].name != "div"
    a, b = torch.randn(4), torch.rand(4) + 0.5
    torch.testing.assert_close(out.module()(a, b), a / b)


@pytest.mark.parametrize("contiguous", [True, False])
def test_reshape_copy_becomes_the_reshape_it_computes(contiguous):
    """torch-tensorrt decomposes `aten.view` into `aten._reshape_copy`, which ExecuTorch has no
    kernel for (a partition left to PyTorch was refused at save)."""
    fn = lambda a: torch.ops.aten._reshape_copy(a, [4, 6]) * 2   # noqa: E731
    a = torch.randn(2, 3, 4) if contiguous else torch.randn(4, 3, 2).permute(2, 1, 0)
    gm = make_fx(fn, tracing_mode="fake")(a)
    renamed = prims_to_aten(gm)
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten._reshape_copy.default not in targets
    assert torch.ops.aten.reshape.default in targets and len(renamed) == 1
    torch.testing.assert_close(gm(a), fn(a), rtol=0, atol=0)
