"""A state write whose new value (or the buffer itself) is also handed to the caller.

Before the fix the compiled module updated such a buffer like eager, but the saved `.pte` never
wrote it: compile gave the copy to the engine, so no write-back was declared, and the runtime
declined to copy an output that was also a delegate output. Now one decision
(`lowering.copier.decide`) says the engine copies, the record carries it to the runtime, and the
runtime both hands the value out and copies it into the buffer. Each case: the compiled module
and the `.pte` step like eager (outputs and every buffer), the runtime copies the buffer's bytes
once per call, and with TensorRT-RTX engines the buffer stays in device memory, copied by its
delegate — no host write-back (it used to be 3 copies, 2 over PCIe).
"""
from __future__ import annotations

import copy

import pytest
import torch

import torch_tensorrt_ext as tte
from rtx_env import compile_rtx, torch_tensorrt_or_skip
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte

pytestmark = pytest.mark.emulated_device

STEPS = 5


class RingReturnsNew(torch.nn.Module):
    """`self.ring.copy_(new); return new, other` — the issue's first case."""

    def __init__(self):
        super().__init__()
        self.register_buffer("ring", torch.zeros(1, 4, 3))
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        new = torch.cat([self.ring[:, :, 1:], x.unsqueeze(-1)], dim=-1)
        self.ring.copy_(new)
        return new, self.lin(x) * 2


class RingReturnsBuffer(RingReturnsNew):
    """`return self.ring, other` after the write."""

    def forward(self, x):
        self.ring.copy_(torch.cat([self.ring[:, :, 1:], x.unsqueeze(-1)], dim=-1))
        return self.ring, self.lin(x) * 2


class EmaReturned(torch.nn.Module):
    """An EMA updated with `mul_().add_()` and returned."""

    def __init__(self):
        super().__init__()
        self.register_buffer("avg", torch.zeros(1, 8))
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        self.avg.mul_(0.9).add_(self.lin(x) * 0.1)
        return self.avg, torch.relu(x) + 1


class KvReturned(torch.nn.Module):
    """A KV cache returned after its write (aliased: written in place, reflected out)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(1, 2, 8, 4))
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, pos):
        self.k.index_copy_(2, pos, self.lin(x))
        return self.k, x.sum() + 1


class KvReturnedLast(KvReturned):
    """The same cache returned as the last output: the engine's aliased output is its last, which
    torch-tensorrt's engine module used to hide (compiling/partition_outputs.py)."""

    def forward(self, x, pos):
        self.k.index_copy_(2, pos, self.lin(x))
        return x.sum() + 1, self.k


def _args(model, step):
    g = torch.Generator().manual_seed(step)
    if isinstance(model, KvReturned):
        return torch.randn(1, 2, 1, 4, generator=g), torch.tensor([step])
    width = 4 if isinstance(model, RingReturnsNew) else 8
    return (torch.randn(1, width, generator=g),)


MODELS = [RingReturnsNew, RingReturnsBuffer, EmaReturned, KvReturned, KvReturnedLast]


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _close(a, b):
    return [float((x - y).abs().max()) for x, y in zip(_flat(a), _flat(b), strict=False)]


@pytest.mark.parametrize("cls", MODELS, ids=lambda c: c.__name__)
def test_returned_state_steps_like_eager_in_the_module_and_the_pte(tmp_path, cls):
    torch_tensorrt = torch_tensorrt_or_skip()
    torch.manual_seed(0)
    model = cls().eval()
    eager, module_eager = copy.deepcopy(model), copy.deepcopy(model)
    args = _args(model, 0)
    with tte.reference.engines():
        trt = torch_tensorrt.compile(torch.export.export(model, args), ir="dynamo",
                                     arg_inputs=list(args), min_block_size=1)
        path = tmp_path / "m.pte"
        torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=list(args))
    fqn = next(iter(dict(model.named_buffers())))
    prog = tte.executorch.load(path)
    nbytes = model.get_buffer(fqn).numel() * model.get_buffer(fqn).element_size()
    for step in range(STEPS):
        a = _args(model, step)
        want = eager(*a)
        assert max(_close(want, trt(*a))) < 1e-5, step
        assert max(_close(module_eager(*a), want)) == 0
        assert float((trt.get_buffer(fqn) - eager.get_buffer(fqn)).abs().max()) < 1e-5, step
        got = prog.run(*a)
        assert max(_close(want, got)) < 1e-5, step
        assert float((prog.state()[fqn] - eager.get_buffer(fqn)).abs().max()) < 1e-5, step
    # per call: a copy-back buffer is copied once, by its delegate (the program copies nothing);
    # a KV cache is written in place and copied once into the output the caller receives
    w = trt.mutation_plan[fqn]
    assert w.copier.name == "ENGINE"
    assert prog.program_copy_bytes()[fqn] == 0
    assert prog.state_traffic()[fqn] == nbytes


@pytest.mark.parametrize("cls", [RingReturnsNew, RingReturnsBuffer, EmaReturned],
                         ids=lambda c: c.__name__)
def test_returned_state_stays_on_the_device_with_tensorrt_rtx_engines(tmp_path, cls):
    """Ahead-of-time TensorRT-RTX build and save (the engines cannot run here): the buffer lives
    on cuda:0, its delegate copies it (and hands the value out), the program copies nothing."""
    torch_tensorrt = torch_tensorrt_or_skip()
    model = cls().eval()
    args = _args(model, 0)
    trt = compile_rtx(model, args)
    torch_tensorrt.save(trt, str(tmp_path / "m.pte"), output_format="executorch",
                        arg_inputs=list(args))
    fqn = next(iter(dict(model.named_buffers())))
    info = inspect_pte((tmp_path / "m.pte").read_bytes()).method("forward")
    (b,) = [b for b in info.buffers if b.fqn == fqn]
    nbytes = model.get_buffer(fqn).numel() * model.get_buffer(fqn).element_size()
    assert (b.kind, b.device, b.program_copy_bytes, b.delegate_copy_bytes, b.host_path) == \
        ("copy_back", "cuda:0", 0, nbytes, "")
