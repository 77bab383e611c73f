"""Stateful models for the end-to-end tests. Most return outputs that depend on their state, so
parity of outputs over steps proves the state persisted; the write-only ones (`kv_write_only`,
a state-only engine) are read back through a second method in test_e2e_reference."""
from __future__ import annotations

import torch
from torch import nn

from plan_models import Stateful, nest


def _kv_index_copy(m, x, p):
    m.k.index_copy_(2, p, x)
    return (m.k * 0.5).sum(dim=2) + m.k.mean()


def _kv_slice(m, x):
    m.k[:, :, 3:4, :] = x
    return torch.softmax(m.k.sum(-1), dim=-1)


def _kv_write_only(m, x, p):
    m.k.index_copy_(2, p, x)
    return x * 2


def _ring(m, x):
    new = torch.cat([m.ring[:, 1:], x], dim=1)
    m.ring.copy_(new)
    return new.sum(dim=1, keepdim=True) * torch.arange(1, 5.0).unsqueeze(1)


def _counter(m, x):
    m.n.add_(1)
    return x * m.n.to(x.dtype) + m.n.to(x.dtype)


def _index_put(m, x, p):
    m.table.index_put_((p,), x)
    return m.table.sum(0)


def _rank3(m, x):
    m.c[:, 2:3, :] = x
    return m.c.cumsum(1)[:, -1]


def _strided(m, x):
    m.c[:, :, 0:8:2, :] = m.c[:, :, 0:8:2, :] + x
    return m.c.sum((0, 1, 3))


def _twice(m, x):
    m.c[:, :, 0:1, :] = x
    m.c[:, :, 1:2, :] = m.c[:, :, 0:1, :] + m.c[:, :, 1:2, :]
    return m.c.sum((0, 1, 3))


def _ema(m, x):
    m.avg.mul_(0.9).add_(x * 0.1)
    m.n.add_(1)
    return m.avg / (1 - 0.9 ** m.n.to(x.dtype))


def _kv_batch2(m, x):
    m.k[:, :, 5:6, :] = x
    return m.k.sum(2)


class GatedDeltaNetish(nn.Module):
    """conv_state ring buffer + recurrent_state outer-product update (Gated DeltaNet shaped)."""

    def __init__(self, d=8, width=4):
        super().__init__()
        torch.manual_seed(1)
        self.w = nn.Parameter(torch.randn(d, width) * 0.3)
        self.register_buffer("conv_state", torch.zeros(1, d, width))
        self.register_buffer("recurrent_state", torch.zeros(1, d, d))

    def forward(self, x):                       # x [1, d]
        conv = torch.cat([self.conv_state[:, :, 1:], x.unsqueeze(-1)], dim=2)
        self.conv_state.copy_(conv)
        h = (conv * self.w).sum(-1)             # [1, d]
        k, v = torch.tanh(h), torch.sigmoid(h)
        new = 0.8 * self.recurrent_state + k.unsqueeze(-1) * v.unsqueeze(-2)
        self.recurrent_state.copy_(new)
        return new @ h.unsqueeze(-1)


class TwoSameName(nn.Module):
    def __init__(self):
        super().__init__()
        self.left = Stateful(_kv_index_copy, k=(1, 2, 8, 4))
        self.right = Stateful(_ring, ring=(4, 3))

    def forward(self, x, p, y):
        return self.left(x, p).sum() + self.right(y)


def _ones_init():
    m = Stateful(_counter, n=(1,))
    m.n.fill_(5.0)
    return m


def x4(step, *shape):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(*shape, generator=g)


# name -> (model factory, args(step), expected kinds {fqn: kind name})
MODELS = {
    "kv_index_copy": (lambda: Stateful(_kv_index_copy, k=(1, 2, 8, 4)),
                      lambda s: (x4(s, 1, 2, 1, 4), torch.tensor([s % 8])), {"k": "KV_ALIAS"}),
    "kv_slice_scatter": (lambda: Stateful(_kv_slice, k=(1, 2, 8, 4)),
                         lambda s: (x4(s, 1, 2, 1, 4),), {"k": "KV_ALIAS"}),
    "kv_write_only": (lambda: Stateful(_kv_write_only, k=(1, 2, 8, 4)),
                      lambda s: (x4(s, 1, 2, 1, 4), torch.tensor([s % 8])), {"k": "KV_ALIAS"}),
    "kv_batch2_slice": (lambda: Stateful(_kv_batch2, k=(2, 2, 8, 4)),
                        lambda s: (x4(s, 2, 2, 1, 4),), {"k": "KV_ALIAS"}),
    "ring_buffer": (lambda: Stateful(_ring, ring=(4, 3)), lambda s: (x4(s, 4, 1),),
                    {"ring": "COPY_BACK"}),
    "counter": (lambda: Stateful(_counter, n=(1,)), lambda s: (x4(s, 3),), {"n": "COPY_BACK"}),
    "initial_value_counter": (_ones_init, lambda s: (x4(s, 3),), {"n": "COPY_BACK"}),
    "index_put_table": (lambda: Stateful(_index_put, table=(8, 4)),
                        lambda s: (x4(s, 1, 4), torch.tensor([(3 * s) % 8])),
                        {"table": "COPY_BACK"}),
    "rank3_cache": (lambda: Stateful(_rank3, c=(2, 8, 4)), lambda s: (x4(s, 2, 1, 4),),
                    {"c": "COPY_BACK"}),
    "strided_write": (lambda: Stateful(_strided, c=(1, 2, 8, 4)), lambda s: (x4(s, 1, 2, 4, 4),),
                      {"c": "COPY_BACK"}),
    "write_twice": (lambda: Stateful(_twice, c=(1, 2, 8, 4)), lambda s: (x4(s, 1, 2, 1, 4),),
                    {"c": "COPY_BACK"}),
    "ema_and_counter": (lambda: Stateful(_ema, avg=(4,), n=(1,)), lambda s: (x4(s, 4),),
                        {"avg": "COPY_BACK", "n": "COPY_BACK"}),
    "nested_three_deep": (lambda: nest(Stateful(_kv_index_copy, k=(1, 2, 8, 4)), "a", "b", "c"),
                          lambda s: (x4(s, 1, 2, 1, 4), torch.tensor([s % 8])),
                          {"a.b.c.k": "KV_ALIAS"}),
    "gated_deltanet_states": (GatedDeltaNetish, lambda s: (x4(s, 1, 8),),
                              {"conv_state": "COPY_BACK", "recurrent_state": "COPY_BACK"}),
    "two_submodules": (TwoSameName, lambda s: (x4(s, 1, 2, 1, 4), torch.tensor([s % 8]),
                                               x4(s + 50, 4, 1)),
                       {"left.k": "KV_ALIAS", "right.ring": "COPY_BACK"}),
}


def _returns_state(m, x):
    m.n.add_(1)
    return m.n


def _state_only(m, x):
    m.n.add_(1)
    return torch.ops.aten.mul.Tensor(x, 2)


def _kv_negative_bounds(m, x):
    m.k[:, :, -2:-1, :] = x
    return m.k.sum(2)


def _read_old_after_write(m, x, p):
    new = m.k.index_copy(2, p, x)
    old = m.k.sum(dim=2)
    m.k.copy_(new)
    return old + new.sum(dim=2)


class _Layer:
    """What transformers' cache layers are: a plain object holding the module's buffers."""

    def __init__(self, keys: torch.Tensor, length: torch.Tensor):
        self.keys, self.length = keys, length


class HeldByAnotherObject(nn.Module):
    """A cache and its length registered as buffers and written through another object holding
    them (non-strict torch.export lifts that object's tensors as constants and runs their writes
    on the module's real buffers while tracing). Not in MODELS: a program exported from it
    non-strict by the caller starts from the traced values, as its ExportedProgram does."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(1, 2, 8, 4))
        self.register_buffer("length", torch.zeros(1))
        self.layer = _Layer(self.k, self.length)

    def forward(self, x, p):
        self.layer.keys.index_copy_(2, p, x)
        self.layer.length.add_(1)
        return self.layer.keys.sum(2) * self.layer.length


MODELS.update({
    "returns_its_state": (lambda: Stateful(_returns_state, n=(1,)), lambda s: (x4(s, 1),),
                          {"n": "COPY_BACK"}),
    "kv_negative_bounds": (lambda: Stateful(_kv_negative_bounds, k=(1, 2, 8, 4)),
                           lambda s: (x4(s, 1, 2, 1, 4),), {"k": "KV_ALIAS"}),
    "reads_old_cache_after_write": (lambda: Stateful(_read_old_after_write, k=(1, 2, 8, 4)),
                                    lambda s: (x4(s, 1, 2, 1, 4), torch.tensor([s % 8])),
                                    {"k": None}),
})
