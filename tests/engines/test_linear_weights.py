"""`engines.linear_weights`: a Linear's weight is stored transposed, so the reference engine's
program multiplies by the stored bytes (`mm`) instead of copying every weight transposed
(`permute_copy`) on every call; a weight read by anything else (a tied embedding) is kept as it
is. Checked on what the compile really built: the engine's weights and its program."""
from __future__ import annotations

import torch

from torch_tensorrt_ext import reference
from torch_tensorrt_ext.engines.reference_engine import ReferenceEngineModule


def _kernel_calls(program: bytes) -> list[str]:
    from executorch.exir._serialize._program import deserialize_pte_binary
    plan = deserialize_pte_binary(program).program.execution_plan[0]
    return [plan.operators[i.instr_args.op_index].name for i in plan.chains[0].instructions
            if hasattr(i.instr_args, "op_index")]


class _Mlp(torch.nn.Module):
    """Two Linears (one without bias, on a 3-D input) around a running sum, as a decoder has."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16, bias=False)
        for p in self.parameters():
            p.data = torch.randn(p.shape, generator=g)
        self.register_buffer("acc", torch.zeros(1, 2, 16))

    def forward(self, x):
        y = self.down(torch.relu(self.up(x)))
        self.acc.add_(y)
        return y * 2


class _Tied(torch.nn.Module):
    """An embedding whose table is also the output projection (tied weights)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(32, 16)
        self.register_buffer("acc", torch.zeros(1, 16))

    def forward(self, ids):
        h = self.emb(ids).sum(1)
        self.acc.add_(h)
        return torch.nn.functional.linear(h, self.emb.weight)


def _engine(trt) -> ReferenceEngineModule:
    (engine,) = [m for m in trt.modules() if isinstance(m, ReferenceEngineModule)]
    return engine


def test_linear_weights_are_stored_transposed_and_never_copied_per_call():
    model = _Mlp().eval()
    args = (torch.randn(1, 2, 16, generator=torch.Generator().manual_seed(1)),)
    trt = reference.compile(model, args)
    engine = _engine(trt)
    program, weights = engine.program, engine.weights
    assert all(w.is_contiguous() for w in weights)
    stored = {tuple(w.shape): w for w in weights}
    torch.testing.assert_close(stored[(16, 32)], model.up.weight.t(), rtol=0, atol=0)
    torch.testing.assert_close(stored[(32, 16)], model.down.weight.t(), rtol=0, atol=0)
    calls = _kernel_calls(bytes(program.numpy()))
    assert "aten::permute_copy" not in calls and calls.count("aten::mm") == 2, calls
    eager = _Mlp().eval()
    for step in range(3):
        x = torch.randn(1, 2, 16, generator=torch.Generator().manual_seed(10 + step))
        with torch.no_grad():
            torch.testing.assert_close(trt(x), eager(x))
    torch.testing.assert_close(trt.gm.get_buffer("acc"), eager.acc)


def test_a_tied_weight_is_kept_as_it_is():
    model = _Tied().eval()
    ids = torch.tensor([[1, 5, 7]])
    trt = reference.compile(model, (ids,))
    engine = _engine(trt)
    program, weights = engine.program, engine.weights
    assert [tuple(w.shape) for w in weights] == [(32, 16)]          # once, not transposed
    torch.testing.assert_close(weights[0], model.emb.weight, rtol=0, atol=0)
    assert "aten::permute_copy" in _kernel_calls(bytes(program.numpy()))
    with torch.no_grad():
        torch.testing.assert_close(trt(ids), _Tied.forward(model, ids))


def test_a_half_precision_linear_with_a_bias_rounds_once_like_eager():
    """bf16 and fp16: the bias is one more row of the stored transposed weight and the engine
    multiplies `[x, 1]` by it — one `mm`, no `add` of the bias after it — so each output is
    rounded once, as eager's biased Linear is: in bf16 equal to eager bit for bit (taken apart,
    the product rounded and then the bias added, it was one rounding off:
    `bf16(bf16(x @ Wᵀ) + b)`)."""
    for dtype in (torch.bfloat16, torch.float16):
        model = _Mlp().eval().to(dtype)
        args = (torch.randn(1, 2, 16, generator=torch.Generator().manual_seed(1)).to(dtype),)
        trt = reference.compile(model, args)
        engine = _engine(trt)
        stored = {tuple(w.shape): w for w in engine.weights}
        assert set(stored) == {(17, 32), (32, 16)}, stored.keys()
        torch.testing.assert_close(stored[(17, 32)],
                                   torch.cat([model.up.weight.t(), model.up.bias[None]]),
                                   rtol=0, atol=0)
        calls = _kernel_calls(bytes(engine.program.numpy()))
        # the one `add` left is the running sum's: none after a product
        assert calls.count("aten::mm") == 2 and calls.count("aten::add") == 1, calls
        eager = _Mlp().eval().to(dtype)
        for step in range(3):
            x = torch.randn(1, 2, 16, generator=torch.Generator().manual_seed(10 + step)).to(dtype)
            with torch.no_grad():
                got, want = trt(x), eager(x)
            if dtype == torch.bfloat16:     # measured equal; fp16's `mm` may sum in another order
                assert torch.equal(got, want), (step, (got.float() - want.float()).abs().max())
            else:
                torch.testing.assert_close(got, want)
