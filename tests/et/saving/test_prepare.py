"""What ExecuTorch's lowering is handed (`executorch.saving.prepare`): an engine that only writes
state in place — hands the program nothing it reads — is refused at save naming the engine, the
buffer and what to change, on both engine kinds, and nothing is written. (ExecuTorch 1.5.1 failed on
an
internal assertion lowering a reference delegate without outputs; its edge passes dropped the
TensorRT engine's call, and the save then refused the first engine's blob for an unrelated
reason.) Found by the generator's `kv_run` writes."""
from __future__ import annotations

import pytest
import torch

import torch_tensorrt_ext as tte
from rtx_env import compile_rtx, torch_tensorrt_or_skip


class WriteOnly(torch.nn.Module):
    """Two positions from a start read on the host; the cache is not read after the write, so the
    engine holding the write has no output the program reads."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.register_buffer("k", torch.zeros(1, 2, 8, 4))

    def forward(self, x, p):
        h = self.proj(x)
        start = p[0].item()
        torch._check(start >= 0)
        torch._check(start <= 6)
        self.k.index_copy_(2, torch.arange(2) + start, h.reshape(1, 2, 1, 4).expand(-1, -1, 2, -1))
        return h * 2


ARGS = (torch.randn(1, 8), torch.tensor([3]))


@pytest.mark.parametrize("kind", ["reference", "tensorrt_rtx"])
def test_a_partition_that_would_only_write_in_place_runs_in_pytorch_and_saves(tmp_path, kind):
    """The cache write's partition would be an engine none of whose outputs the
    program reads, which ExecuTorch cannot lower (the save refused it); it runs in PyTorch
    (compiling/write_only_partitions) and the program writes the buffer itself."""
    torch_tensorrt = torch_tensorrt_or_skip()
    ep = torch.export.export(WriteOnly().eval(), ARGS)
    if kind == "reference":
        with tte.reference.engines():
            trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(ARGS),
                                         min_block_size=1)
    else:
        trt = compile_rtx(ep, ARGS)
    write = trt.mutation_plan["k"]
    assert (write.is_kv, write.engine) == (False, None)
    assert "PyTorch-run piece '_run_on_gpu_2'" in write.reason
    path = tmp_path / "m.pte"
    torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=list(ARGS))
    if kind != "reference":
        assert path.stat().st_size > 0      # TensorRT-RTX engines cannot run here
        return
    eager, prog = WriteOnly().eval(), tte.executorch.load(str(path))
    eager.load_state_dict(ep.state_dict, strict=False)
    for step in range(3):
        args = (torch.randn(1, 8, generator=torch.Generator().manual_seed(step)),
                torch.tensor([step]))
        torch.testing.assert_close(prog.run(*args)[0], eager(*args))
        torch.testing.assert_close(prog.state()["k"], eager.k)


class ViewedKvWriteAfterAHostOp(torch.nn.Module):
    """A KV `index_put_` (`k[:, :, pos] = v`: `index_put(k, [None, None, pos], v)`) of a value
    viewed after an op PyTorch runs (`sin`, `torch_executed_ops`); nothing after reads the cache,
    so its partition — the `view` and the write — is left to PyTorch (write_only_partitions)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("k", torch.zeros(1, 2, 6, 4))

    def forward(self, x, pos):
        h = torch.sin(self.lin(x))
        self.k[:, :, pos] = h.view(1, 2, 1, 4)
        return h


def test_a_view_in_a_partition_left_to_pytorch_saves_and_steps_like_eager():
    """torch-tensorrt decomposes the `view` into `aten._reshape_copy`, which
    ExecuTorch has no kernel for — in an engine's payload the reference engine swapped it, in the
    host part nothing did: the save was refused, "Missing out variants:
    {'aten::_reshape_copy'}". `prepare` rewrites it there as in a payload (`prims_to_aten`).
    Compiled module and .pte (reference engines) step like eager; TensorRT-RTX engines save."""
    from stateful_check import ModuleProgram, check_program
    torch_tensorrt_or_skip()
    program = ModuleProgram(ViewedKvWriteAfterAHostOp, lambda s: (
        torch.randn(1, 8, generator=torch.Generator().manual_seed(s)), torch.tensor([s % 6])),
        ("k",), frozenset({"torch.ops.aten.sin.default"}))
    seen = {}
    result = check_program(program, steps=4, rtx=True, observe=seen.__setitem__)
    assert result.ok, result.report(program)
    write = seen["plan"]["k"]
    assert write.engine is None and "PyTorch-run piece '_run_on_gpu" in write.reason


class HalfScaleOnTheHost(torch.nn.Module):
    """A 0-d fp16 product with a float scalar in the part of the program PyTorch runs (`mul` is
    left to it), feeding a half-precision counter the engine after it adds to."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("n", torch.zeros(1, dtype=torch.float16))

    def forward(self, x):
        h = self.lin(x)
        s = h.mean().to(torch.float16) * 0.1
        self.n.add_(s)
        return torch.sigmoid(h) * 2.0 + s.float()


def test_a_0d_half_product_left_to_pytorch_keeps_its_dtype():
    """ExecuTorch 1.5.1 lowers a 0-d half-precision tensor times a float to an fp32 result (in
    an engine's payload as on the host): the delegate taking it refused the run (0x12). The
    host part gets the payload's forms (`kernel_forms`). Compiled module and .pte step like
    eager."""
    from stateful_check import ModuleProgram, check_program
    from stateful_grammar import Buf

    class HalfState(ModuleProgram):
        bufs = (Buf("counter", "float16"),)   # compared at half precision's tolerance

    program = HalfState(HalfScaleOnTheHost, lambda s: (
        torch.randn(1, 8, generator=torch.Generator().manual_seed(s)),), ("n",),
        frozenset({"torch.ops.aten.mul.Tensor"}))
    result = check_program(program, steps=4)
    assert result.ok, result.report(program)
