"""The reference save path holds no copy of the weights beyond the model's own and the engines'
snapshot (one per weight for the whole program, `engines.weights.held`). Checked by storage
identity, exactly: measured with the live tensor storages of a 256 MiB stack, the save held 3x
the weights above the model's own before (a deep copy of the model to trace it, torch-tensorrt's
exporter deep-copying the compiled module with its engines, the inlined engine's bytes cloned),
1x after; a prefill + decode program held 2x (each method's engine packed its own copy), 1x
since the engines share one snapshot (benchmarks/bench_weights.py prints the RSS figures)."""
from __future__ import annotations

import copy

import torch

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.engines.reference_engine import ReferenceEngineModule

WIDTH = 256          # a 256 KiB weight: a named-data weight of the payload


class Cached(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.register_buffer("cache", torch.zeros(1, 4, WIDTH))

    def forward(self, x, pos):
        self.cache.index_copy_(1, pos, self.proj(x))
        return self.cache.sum(1)


def _args():
    return torch.randn(1, 1, WIDTH), torch.tensor([1])


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def test_the_trace_copies_the_model_s_state_not_its_weights(monkeypatch):
    model = Cached().eval()
    traced, export = [], torch.export.export

    def recording(mod, *a, **k):
        if isinstance(mod, Cached):
            traced.append(mod)
        return export(mod, *a, **k)
    monkeypatch.setattr(torch.export, "export", recording)
    tte.reference.export_program(model, _args())
    assert len(traced) == 1 and traced[0] is not model
    assert traced[0].proj.weight is model.proj.weight        # the weights: the model's own
    assert _storage(traced[0].cache) != _storage(model.cache)  # its state: a copy
    assert model.cache.abs().sum() == 0                      # which the trace's write left alone


def _engines(module: torch.nn.Module) -> list[ReferenceEngineModule]:
    return [m for m in module.modules() if isinstance(m, ReferenceEngineModule)]


def _big(ep: torch.export.ExportedProgram, nbytes: int) -> list[torch.Tensor]:
    return [t for t in (*ep.state_dict.values(), *ep.constants.values())
            if isinstance(t, torch.Tensor) and t.nbytes >= nbytes]


def test_the_saved_program_holds_the_engine_s_own_tensors_and_copies_share_them():
    model = Cached().eval()
    ep, compiled = tte.reference.export_program(model, _args())
    [engine] = _engines(compiled.gm)
    [weight] = engine.weights
    assert torch.equal(weight, model.proj.weight.t())     # stored transposed (linear_weights)
    assert _storage(weight) != _storage(model.proj.weight)   # a snapshot: the model's writes
    # never reach it; the program's big constants are the engine's own tensors, no clone
    assert {_storage(t) for t in _big(ep, weight.nbytes)} == {_storage(weight)}
    twin = copy.deepcopy(engine)
    assert _storage(twin.weights[0]) == _storage(weight)
    assert _storage(twin.program) == _storage(engine.program)
    assert twin.aliased_io == engine.aliased_io and twin.aliased_io is not engine.aliased_io


class Prefill(torch.nn.Module):
    """`Cached`'s projection over a prompt of two tokens: another engine, the same weight."""

    def __init__(self, decode: Cached):
        super().__init__()
        self.proj, self.cache = decode.proj, decode.cache

    def forward(self, x, pos):
        self.cache.index_copy_(1, pos, self.proj(x))
        return self.cache.sum(1)


def test_every_method_s_engines_hold_one_snapshot_of_a_shared_weight():
    decode = Cached().eval()
    prefill = Prefill(decode)
    eps = tte.reference.export_methods({
        "decode": (decode, _args()),
        "prefill": (prefill, (torch.randn(1, 2, WIDTH), torch.tensor([0, 1])))})
    big = {name: _big(ep, decode.proj.weight.nbytes) for name, ep in eps.items()}
    assert [len(b) for b in big.values()] == [1, 1]
    a, b = big["decode"][0], big["prefill"][0]
    assert a is not b and _storage(a) == _storage(b)      # a constant each, one snapshot
    assert _storage(a) != _storage(decode.proj.weight)
    assert torch.equal(a, decode.proj.weight.t())
