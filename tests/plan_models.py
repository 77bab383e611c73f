"""Small stateful modules for the plan tests: each is one classification rule branch."""
from __future__ import annotations

import torch
from torch import nn

C4 = (1, 2, 8, 4)  # [b, d, s_max, h]


class Stateful(nn.Module):
    """Buffers from `shapes`, `fn(self, *args)` as forward."""

    def __init__(self, fn, **shapes):
        super().__init__()
        self.fn = fn
        for name, spec in shapes.items():
            shape, dtype = spec if isinstance(spec, tuple) and isinstance(spec[-1], torch.dtype) \
                else (spec, torch.float32)
            self.register_buffer(name, torch.zeros(shape, dtype=dtype))

    def forward(self, *args):
        return self.fn(self, *args)


def nest(module: nn.Module, *names: str) -> nn.Module:
    """Wrap `module` so it sits at `names[0].names[1]...` and forward passes through."""
    for name in reversed(names):
        module = Wrapper(name, module)
    return module


class Wrapper(nn.Module):
    def __init__(self, name: str, inner: nn.Module):
        super().__init__()
        self.name_ = name
        setattr(self, name, inner)

    def forward(self, *args):
        return getattr(self, self.name_)(*args)


def export(module: nn.Module, *args, dynamic_shapes=None) -> torch.export.ExportedProgram:
    return torch.export.export(module.eval(), args, dynamic_shapes=dynamic_shapes)


class StateReadOnTheHost(torch.nn.Module):
    """A PyTorch-run op reads the buffer beside the engine that writes it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(1, 8))

    def forward(self, x):
        seen = torch.sin(self.state)
        new = self.state * 0.5 + x
        self.state.copy_(new)
        return seen + new * 2


class RingWrittenInABranch(torch.nn.Module):
    """A ring buffer written from the result of a `torch.cond` (issue 45 class 5): a step whose
    input sums above zero pushes a row, any other keeps the ring as it was."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("ring", torch.zeros(4, 8))

    def forward(self, x):
        def push(h, ring):
            return torch.cat([ring[1:], h], 0)

        def keep(h, ring):
            return ring.clone()
        new = torch.cond(x.sum() > 0, push, keep, (self.lin(x), self.ring))
        self.ring.copy_(new)
        return self.lin(new.sum(0, keepdim=True)) + x

    @staticmethod
    def args(step: int) -> tuple[torch.Tensor]:
        """Steps 0, 1, 3 push (a positive sum), step 2 keeps: both branches run."""
        x = torch.rand(1, 8, generator=torch.Generator().manual_seed(step)) + 0.1
        return (-x if step == 2 else x,)


class AdaptingBatchNorm(torch.nn.Module):
    """BatchNorm whose running statistics adapt at inference (test-time adaptation, issue 45
    class 1): `running_mean`, `running_var`, `num_batches_tracked` written every step."""

    written = ("bn.num_batches_tracked", "bn.running_mean", "bn.running_var")

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        self.bn.train()
        return self.bn(self.lin(x))

    @staticmethod
    def args(step: int) -> tuple[torch.Tensor]:
        return (torch.randn(3, 4, generator=torch.Generator().manual_seed(step)),)


class AccumulatedByMap(torch.nn.Module):
    """A buffer written from the result of a `map` over the input's rows (its body an emitted
    loop; torch_tensorrt.compile refuses `map` upstream, so it is saved by ExecuTorch alone)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("acc", torch.zeros(3, 4))

    def forward(self, x):
        from torch._higher_order_ops.map import map as hop_map

        def body(row, acc):
            return row * 2 + acc.sum(0)
        new = hop_map(body, x, self.acc)
        self.acc.copy_(new)
        return new + 1
