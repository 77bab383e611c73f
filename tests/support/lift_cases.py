"""Exported programs with state in every form the lift meets — every e2e model, ExecuTorch's
llama caches (index_put KV writes, data-dependent positions), transformers' static cache (strict;
and non-strict, whose caches are lifted as constants and merged into buffers), state held on a
plain Python object, parameters with non-persistent buffers and read-only constants, no user
inputs, an effectful op (`Printing`). `CASES[name]()` -> (ExportedProgram, user args of a call).
"""
from __future__ import annotations

import pytest
import torch
from e2e_models import MODELS


class Holder:
    """A plain Python object holding tensors (like transformers' caches)."""


class ObjectState(torch.nn.Module):
    """One tensor written in place that no buffer holds, one only read: non-strict export
    lifts both as constants; the written one is planned as a buffer of its own."""

    def __init__(self):
        super().__init__()
        self.held = Holder()
        self.held.state = torch.zeros(1, 2, 8, 4)
        self.held.scale = torch.full((4,), 0.5)

    def forward(self, x, p):
        self.held.state.index_copy_(2, p, x)
        return self.held.state.sum(2) * self.held.scale


class Mixed(torch.nn.Module):
    """Parameters, a non-persistent buffer, a persistent one read only, and two written."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.register_buffer("k", torch.zeros(1, 2, 8, 4))
        self.register_buffer("n", torch.zeros(1), persistent=False)
        self.register_buffer("bias", torch.arange(4.0))

    def forward(self, x, p):
        self.k.index_copy_(2, p, self.proj(x))
        self.n.add_(1)
        return self.k.sum(2) + self.bias * self.n


class NoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("n", torch.zeros(2))

    def forward(self):
        self.n.add_(1)
        return self.n * 2


class Printing(torch.nn.Module):
    """`aten._print` is an effectful op: the functional program threads an effect token."""

    def __init__(self):
        super().__init__()
        self.register_buffer("n", torch.zeros(1))

    def forward(self, x):
        torch.ops.aten._print("step")
        self.n.add_(1)
        return x + self.n


def _e2e(name):
    factory, args, _ = MODELS[name]
    return torch.export.export(factory().eval(), args(0)), args(1)


def _own():
    x, p = torch.randn(1, 2, 1, 4), torch.tensor([3])
    return {
        "object_state": (lambda: torch.export.export(ObjectState(), (x, p), strict=False),
                         (x, p)),
        "params_and_constants": (lambda: torch.export.export(Mixed(), (x, p)), (x, p)),
        "no_inputs": (lambda: torch.export.export(NoInputs(), ()), ()),
    }


def _llama(ring):
    attention = pytest.importorskip("executorch.examples.models.llama.attention")
    from llama_layers import Layer, _args
    cache = (attention.RingKVCache(1, 3, 2, 4, True) if ring
             else attention.KVCache(1, 8, 2, 4, False))
    return torch.export.export(Layer(cache).eval(), _args(0)), _args(1)


def _hf(non_strict):
    pytest.importorskip("transformers")
    from hf_models import MAX_CACHE, _model, _tokens
    from transformers.integrations.executorch import (
        TorchExportableModuleForDecoderOnlyLM,
        TorchExportableModuleWithStaticCache,
    )
    model = _model("llama")
    if non_strict:
        wrapper = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=MAX_CACHE)
        return (torch.export.export(wrapper, (_tokens(0), None, torch.tensor([0])), strict=False),
                (_tokens(1), None, torch.tensor([1])))
    exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=MAX_CACHE)
    return (exportable.export(input_ids=_tokens(0), cache_position=torch.tensor([0])),
            (_tokens(1), torch.tensor([1])))


CASES = {**{f"e2e_{n}": (lambda n=n: _e2e(n)) for n in MODELS},
         **{n: (lambda f=f, a=a: (f(), a)) for n, (f, a) in _own().items()},
         "llama_index_put": lambda: _llama(False), "llama_ring_item": lambda: _llama(True),
         "hf_llama_strict": lambda: _hf(False), "hf_llama_non_strict": lambda: _hf(True)}
