"""A small multi-layer decoder with every kind of state the project handles.

Invariant: each layer owns, in nested modules, an `index_copy` KV cache (`attn.k_cache`), a
`slice_scatter` KV cache (`attn.v_cache`), a convolution ring buffer (`conv.state`), and the
model owns a step counter (`step`). One `forward` call is one decode step at position `pos`.
"""
from __future__ import annotations

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, heads: int, s_max: int, head_dim: int):
        super().__init__()
        dim = heads * head_dim
        self.heads, self.head_dim = heads, head_dim
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.register_buffer("k_cache", torch.zeros(1, heads, s_max, head_dim))
        self.register_buffer("v_cache", torch.zeros(1, heads, s_max, head_dim))

    def forward(self, x: torch.Tensor, pos: torch.Tensor, pos_int: int) -> torch.Tensor:
        split = lambda t: t.view(1, 1, self.heads, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        self.k_cache.index_copy_(2, pos, k)                      # KV: index_copy along dim 2
        self.v_cache[:, :, pos_int:pos_int + 1, :] = v           # KV: slice_scatter along dim 2
        att = torch.softmax(q @ self.k_cache.transpose(-1, -2) / self.head_dim ** 0.5, dim=-1)
        return (att @ self.v_cache).transpose(1, 2).reshape(1, 1, -1)


class ConvState(nn.Module):
    """A causal depthwise convolution with a ring buffer of the last `width` inputs."""

    def __init__(self, dim: int, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, width) * 0.2)
        self.register_buffer("state", torch.zeros(1, dim, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        new = torch.cat([self.state[:, :, 1:], x.transpose(1, 2)], dim=2)  # ring via cat
        self.state.copy_(new)
        return (new * self.weight).sum(-1).unsqueeze(1)


class Block(nn.Module):
    def __init__(self, heads: int, s_max: int, head_dim: int, width: int):
        super().__init__()
        dim = heads * head_dim
        self.attn = Attention(heads, s_max, head_dim)
        self.conv = ConvState(dim, width)
        self.mlp = nn.Linear(dim, dim)

    def forward(self, x, pos, pos_int):
        x = x + self.attn(x, pos, pos_int)
        x = x + self.conv(x)
        return x + torch.tanh(self.mlp(x))


class Decoder(nn.Module):
    """`forward(x [1,1,dim], pos int64[1])`; `pos_int` is the same position as a Python int,
    fixed at export time (the slice_scatter cache needs concrete bounds)."""

    def __init__(self, layers: int = 3, heads: int = 2, s_max: int = 16, head_dim: int = 8,
                 width: int = 4, pos_int: int = 0, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.layers = nn.ModuleList(Block(heads, s_max, head_dim, width) for _ in range(layers))
        self.register_buffer("step", torch.zeros(1, dtype=torch.int64))
        self.pos_int = pos_int
        self.dim = heads * head_dim

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, pos, self.pos_int)
        self.step.add_(1)
        return x

    def example_args(self, pos: int = 0):
        return (torch.randn(1, 1, self.dim), torch.tensor([pos]))


def export_decoder(layers: int = 3, **kw) -> torch.export.ExportedProgram:
    model = Decoder(layers=layers, **kw).eval()
    return torch.export.export(model, model.example_args(model.pos_int))
