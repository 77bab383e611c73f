"""ExecuTorch's own llama caches (`executorch.examples.models.llama.attention`) behind one
projection layer, as their users write them: `_kv(dynamic)` a `KVCache`, `_ring(dynamic)` a
`RingKVCache` of 6 slots (wraps in 8 steps); `_args(step)` one call's inputs."""
from __future__ import annotations

import pytest
import torch

attention = pytest.importorskip("executorch.examples.models.llama.attention")

HEADS, DIM = 2, 4


class Layer(torch.nn.Module):
    """A projection writing k/v through the cache's `update`, reading the whole cache back."""

    def __init__(self, cache):
        super().__init__()
        torch.manual_seed(0)
        self.kv = cache
        self.proj = torch.nn.Linear(DIM, DIM)

    def forward(self, x, input_pos):
        k = self.proj(x)
        k_cache, v_cache = self.kv.update(input_pos, k, k * 2)
        return k_cache.sum(2) + v_cache.mean(2)


def _kv(dynamic):
    return Layer(attention.KVCache(1, 8, HEADS, DIM, dynamic))


def _ring(dynamic):
    return Layer(attention.RingKVCache(1, 3, HEADS, DIM, dynamic))  # 6 slots: wraps in 8 steps


def _args(step):
    return (torch.randn(1, HEADS, 1, DIM, generator=torch.Generator().manual_seed(step)),
            torch.tensor([step]))
