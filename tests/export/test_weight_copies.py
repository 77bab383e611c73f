"""The reference save path holds no copy of the weights beyond the model's own and the engine's
packed payload (its one copy, `engines.weights.pack`). Checked by storage identity, exactly:
measured with the live tensor storages of a 256 MiB stack, the save held 3x the weights above
the model's own before (a deep copy of the model to trace it, torch-tensorrt's exporter
deep-copying the compiled module with its engines, the inlined engine's bytes cloned), 1x
after (benchmarks/bench_weights.py prints the RSS figures)."""
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


def test_the_saved_program_holds_the_engine_s_own_bytes_and_copies_share_them():
    model = Cached().eval()
    ep, compiled = tte.reference.export_program(model, _args())
    engines = [m for m in compiled.gm.modules() if isinstance(m, ReferenceEngineModule)]
    assert len(engines) == 1
    payload = engines[0].payload
    assert payload.nbytes > model.proj.weight.nbytes      # the weight is packed in it
    big = [t for t in (*ep.state_dict.values(), *ep.constants.values())
           if isinstance(t, torch.Tensor) and t.nbytes >= model.proj.weight.nbytes]
    assert [_storage(t) for t in big] == [_storage(payload)]   # the engine's bytes, no clone
    twin = copy.deepcopy(engines[0])
    assert _storage(twin.payload) == _storage(payload)
    assert twin.aliased_io == engines[0].aliased_io and twin.aliased_io is not \
        engines[0].aliased_io
