"""Lifting an ExportedProgram straight from its buffer inputs (`lowering/lift_program`) gives what
lifting its `module(check_guards=False)` gives, node for node — names, targets, arguments, order —
with the same pairings, initial values and registered state, and runs the same; it never calls
`module()` and leaves the program as it was. A program it does not handle (effect tokens) takes
the `module()` way and is lifted correctly. Models: every e2e model, ExecuTorch's llama caches
(index_put KV writes, data-dependent positions), transformers' static cache (strict; and
non-strict, whose caches are lifted as constants and merged into buffers), state held on a plain
Python object, parameters with non-persistent buffers and read-only constants, no user inputs.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch.fx.node import map_arg

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.lowering import lift as lift_module
from torch_tensorrt_ext.lowering.graph_writes import functional_program
from torch_tensorrt_ext.lowering.lift_program import liftable

from e2e_models import MODELS
from trace_counts import count_decompositions


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
    from test_llama_executorch import Layer, _args
    cache = (attention.RingKVCache(1, 3, 2, 4, True) if ring
             else attention.KVCache(1, 8, 2, 4, False))
    return torch.export.export(Layer(cache).eval(), _args(0)), _args(1)


def _hf(non_strict):
    pytest.importorskip("transformers")
    from transformers.integrations.executorch import (
        TorchExportableModuleForDecoderOnlyLM, TorchExportableModuleWithStaticCache)
    from test_hf_transformers import MAX_CACHE, _model, _tokens
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


def _names(arg):
    return map_arg(arg, lambda n: n.name)


def _nodes(gm):
    return [(n.op, n.name, str(n.target), _names(n.args), _names(n.kwargs)) for n in gm.graph.nodes]


def _vals(gm):
    return [(n.name, getattr(v, "shape", v), getattr(v, "dtype", None))
            for n in gm.graph.nodes if n.op == "placeholder"
            for v in [n.meta.get("val")]]


def _state(gm):
    """Every attribute as registered: parameters, buffers (persistent or not), plain tensors,
    submodules — by name, in order, and by object identity."""
    plain = [(f"{p}.{k}" if p else k, v) for p, m in gm.named_modules()
             for k, v in vars(m).items() if isinstance(v, torch.Tensor)]
    return {"params": [(k, id(v)) for k, v in gm.named_parameters()],
            "buffers": [(k, id(v)) for k, v in gm.named_buffers()],
            "persistent": list(gm.state_dict()),
            "plain": [(k, id(v)) for k, v in plain],
            "modules": [k for k, _ in gm.named_modules()]}


def _run(lifted, user_args):
    flat = [a for a in user_args if a is not None] if len(user_args) > len(lifted.user_inputs) \
        else list(user_args)
    state = [lifted.initial_value(f).clone() for f, _ in lifted.buffer_inputs]
    with torch.no_grad():
        return lifted.gm(*flat, *state)


def _lift_both(monkeypatch, ep, plan):
    functional = functional_program(ep)
    before = _nodes(functional.graph_module)
    with monkeypatch.context() as m:
        m.setattr(torch.export.ExportedProgram, "module", _no_module)
        direct = tte.lift_mutated_buffers(ep, plan)
    assert _nodes(functional.graph_module) == before      # the program is left as it was
    with monkeypatch.context() as m:
        m.setattr(lift_module, "lift_program", lambda *a: None)
        via_module = tte.lift_mutated_buffers(ep, plan)
    return direct, via_module


def _no_module(self, *a, **k):
    raise AssertionError("ExportedProgram.module() called")


@pytest.mark.parametrize("name", sorted(CASES))
def test_lifting_from_the_program_equals_lifting_its_module(monkeypatch, name):
    ep, user_args = CASES[name]()
    plan = tte.plan_mutations(ep)
    assert len(plan) > 0 and liftable(functional_program(ep))
    direct, via_module = _lift_both(monkeypatch, ep, plan)
    assert _nodes(direct.gm) == _nodes(via_module.gm)
    assert _vals(direct.gm) == _vals(via_module.gm)
    assert direct.user_inputs == via_module.user_inputs
    assert direct.buffer_inputs == via_module.buffer_inputs
    assert direct.buffer_outputs == via_module.buffer_outputs
    assert direct.num_user_outputs == via_module.num_user_outputs
    assert [f for f, _ in direct.initial_values] == [f for f, _ in via_module.initial_values]
    for (f, a), (_, b) in zip(direct.initial_values, via_module.initial_values, strict=False):
        assert torch.equal(a, b), f
    assert _state(direct.gm) == _state(via_module.gm)
    assert "_guards_fn" not in direct.gm.code
    for got, want in zip(_run(direct, user_args), _run(via_module, user_args), strict=False):
        assert torch.equal(got, want)


def test_a_program_with_effect_tokens_is_lifted_through_its_module(monkeypatch):
    ep = torch.export.export(Printing(), (torch.ones(1),))
    plan = tte.plan_mutations(ep)
    functional = functional_program(ep)
    assert not liftable(functional)     # a TOKEN input and output
    calls = []
    real = torch.export.ExportedProgram.module
    monkeypatch.setattr(torch.export.ExportedProgram, "module",
                        lambda self, **k: calls.append(k) or real(self, **k))
    lifted = tte.lift_mutated_buffers(ep, plan)
    assert calls == [{"check_guards": False}]
    assert lifted.buffer_inputs == (("n", "b_n"),) and lifted.buffer_outputs == (("n", 1),)
    assert "_guards_fn" not in lifted.gm.code
    out, new_n = lifted.gm(torch.ones(1), torch.zeros(1))
    assert torch.equal(out, torch.full((1,), 2.0)) and torch.equal(new_n, torch.ones(1))


def test_lifting_a_planned_training_program_builds_no_module(monkeypatch):
    """plan + lift of a training-IR program: the lift reuses the plan's functional program and
    builds no `module()` of it (torch's own functionalization builds one, inside the plan)."""
    factory, args, _ = MODELS["two_submodules"]
    model = factory().eval()
    ep = torch.export.export(copy.deepcopy(model), args(0))
    plan = tte.plan_mutations(ep)
    monkeypatch.setattr(torch.export.ExportedProgram, "module", _no_module)
    decompositions = count_decompositions(monkeypatch)
    lifted = tte.lift_mutated_buffers(ep, plan)
    assert decompositions == []
    state = [lifted.initial_value(f).clone() for f, _ in lifted.buffer_inputs]
    outs = lifted.gm(*args(0), *state)
    with torch.no_grad():
        want = model(*args(0))
    torch.testing.assert_close(outs[0], want)
    for fqn, i in lifted.buffer_outputs:
        torch.testing.assert_close(outs[i], model.get_buffer(fqn))
