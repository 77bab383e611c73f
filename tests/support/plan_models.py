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


def decomposed_gm(module: nn.Module, *args) -> torch.fx.GraphModule:
    """`module` (in eval mode) exported, decomposed and unlifted: the functional GraphModule
    torch-tensorrt's compile receives."""
    return torch.export.export(module.eval(), args).run_decompositions({}).module()


class RingWrittenInABranch(torch.nn.Module):
    """A ring buffer written from the result of a `torch.cond`: a step whose
    input sums above zero pushes a row, any other keeps the ring as it was."""

    written = ("ring",)

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


class TwoBuffersWrittenFromConds(torch.nn.Module):
    """Cond-written buffers as the generator found them, shrunk: two buffers, each written from a
    `torch.cond`'s result, a host op between them. ExecuTorch 1.5.1 hands the first cond's
    branch tensor on as its result, in the region the second cond's branches compute in, so
    without `saving.branch_results` `a` was written with the second cond's value."""

    written = ("a", "b")

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("a", torch.zeros(1, 8))
        self.register_buffer("b", torch.zeros(1, 8))

    def forward(self, x):
        h = self.lin(x)
        a = torch.cond(x.sum() > 0, lambda s, v: s + v, lambda s, v: s * 0.5 - v, (self.a, h))
        self.a.copy_(a)
        h = torch.sigmoid(h)
        b = torch.cond(x.sum() < 0, lambda s, v: s + v, lambda s, v: s * 0.5 - v, (self.b, h))
        self.b.copy_(b)
        return self.lin(h)

    @staticmethod
    def args(step: int) -> tuple[torch.Tensor]:
        """Steps 0 and 2 take the first cond's true branch and the second's false one, 1 and 3
        the others."""
        x = torch.randn(1, 8, generator=torch.Generator().manual_seed(step))
        return (x if (x.sum() > 0) == (step % 2 == 0) else -x,)


class AdaptingBatchNorm(torch.nn.Module):
    """BatchNorm whose running statistics adapt at inference (test-time adaptation):
    `running_mean`, `running_var`, `num_batches_tracked` written every step."""

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


class TransposedColumnWrite(nn.Module):
    """A write through a transposed view of a buffer beside other writes."""

    written = ("acc", "buf")

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("buf", torch.zeros(4, 3))
        self.register_buffer("acc", torch.zeros(3, 4))

    def forward(self, x):
        h = self.lin(x)
        self.buf[0].add_(1)
        self.buf.t()[1].copy_(h[0])
        self.acc.t().add_(self.buf)
        return self.buf.t() + 0, self.acc


class _StatefulBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cnt", torch.zeros(1, dtype=torch.int32), persistent=False)
        self.register_buffer("kv", torch.zeros(2, 4))
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        self.bn.train()
        c = self.cnt.add_(1)
        k = self.kv[0].copy_(x[0])
        return self.bn(x), k, c, self.kv.t()


class NestedMixedStateOutputs(nn.Module):
    """Nested blocks returning state of mixed dtypes: views of buffers, a non-persistent int32
    counter, train-mode BatchNorm statistics."""

    written = tuple(f"{m}.{b}" for m in "ab" for b in (
        "bn.num_batches_tracked", "bn.running_mean", "bn.running_var", "cnt", "kv"))

    def __init__(self):
        super().__init__()
        self.a, self.b = _StatefulBlock(), _StatefulBlock()

    def forward(self, x):
        y, k, c, t = self.a(x)
        z, k2, c2, _ = self.b(torch.sin(y) + 1)
        return z + k2, k, c + c2, k2, t, c2


class KvWriteAfterAHostOp(nn.Module):
    """An engine whose only effect is an in-place KV write: a host op (`sin`, left to PyTorch)
    splits the graph just before the cache write, nothing after reads it."""

    written = ("s0",)

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("s0", torch.zeros(1, 2, 6, 4))

    def forward(self, x, pos):
        v = torch.sin(self.lin(x).view(1, 2, 1, 4))
        self.s0.index_copy_(2, pos, v)
        return v


class DecayingState(nn.Module):
    """One Linear and a copy-back state that decays by half each call (a TensorRT engine's
    copy-back write): `width` features; `seed` fixes the weights when given."""

    def __init__(self, width: int, seed: int | None = None):
        super().__init__()
        if seed is not None:
            torch.manual_seed(seed)
        self.lin = nn.Linear(width, width)
        self.register_buffer("state", torch.zeros(1, width))

    def forward(self, x):
        new = self.state * 0.5 + self.lin(x)
        self.state.copy_(new)
        return new * 2
