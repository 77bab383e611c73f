"""A reference payload taken as a program without retracing (`engines.lifted_program`) and lowered
once per distinct operator call (`engines.edge_replay`) is the program ExecuTorch's own `to_edge`
makes of the exported partition: the same kernel calls in the same order, the same outputs — for
every partition the e2e models and the decoder hand to the reference compiler — and a call lowers
apart from a call that differs only in a scalar's type or sign."""
from __future__ import annotations

import copy

import pytest
import torch

from torch_tensorrt_ext import reference
from torch_tensorrt_ext.demo.models import Decoder
from torch_tensorrt_ext.engines import edge_replay, payload
from torch_tensorrt_ext.engines.execute_op import run_payload
from torch_tensorrt_ext.engines.lifted_program import lifted_program
from torch_tensorrt_ext.engines.prims_to_aten import prims_to_aten
from torch_tensorrt_ext.lowering.graph_writes import example_args
from torch_tensorrt_ext.engines import reference_engine as seam
from e2e_models import MODELS


def _kernel_calls(program: bytes) -> list:
    from executorch.exir._serialize._program import deserialize_pte_binary

    plan = deserialize_pte_binary(program).program.execution_plan[0]
    ops = [plan.operators[i.instr_args.op_index] for i in plan.chains[0].instructions
           if hasattr(i.instr_args, "op_index")]
    return [f"{o.name}.{o.overload}" for o in ops]


def _partitions(monkeypatch, model, args) -> list:
    """The partition GraphModules the reference compiler lowers for `model`, as it gets them."""
    seen, real = [], seam.to_executorch_program

    def record(gm, *rest):
        seen.append(copy.deepcopy(gm))
        prims_to_aten(seen[-1])     # as the payload takes it (its first rewrite)
        return real(gm, *rest)

    monkeypatch.setattr(seam, "to_executorch_program", record)
    reference.compile(model, args)
    return seen


def _inputs(gm) -> list:
    g = torch.Generator().manual_seed(0)
    out = []
    for p in (n for n in gm.graph.nodes if n.op == "placeholder"):
        v = p.meta["val"]
        t = (torch.randn(tuple(v.shape), generator=g) if v.dtype.is_floating_point
             else torch.zeros(tuple(v.shape)))
        out.append(t.to(v.dtype))
    return out


def _full(ep) -> bytes:
    """The payload through ExecuTorch's whole pipeline."""
    from executorch.exir import to_edge

    return payload.program_bytes(to_edge(copy.deepcopy(ep), compile_config=payload.edge_config()))


def _replayed(ep) -> bytes:
    edge = edge_replay.replayed_edge(copy.deepcopy(ep), payload.edge_config())
    assert edge is not None
    return payload.program_bytes(edge)


def _assert_same_program(gm) -> None:
    exported = torch.export.export(copy.deepcopy(gm), example_args(gm), strict=False)
    lifted = lifted_program(copy.deepcopy(gm))
    assert lifted is not None and edge_replay.replayable(lifted)
    replayed, full = _replayed(lifted), _full(exported)
    assert _kernel_calls(replayed) == _kernel_calls(full)
    for got, want in zip(run_payload(replayed, _inputs(gm)), run_payload(full, _inputs(gm)),
                         strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)


def _program_shape(ep) -> tuple:
    sig = ep.graph_signature
    vals = [(n.meta["val"].dtype, tuple(n.meta["val"].shape)) for n in ep.graph.nodes
            if n.op == "placeholder"]
    calls = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    return ([(s.kind, s.target) for s in sig.input_specs], [s.kind for s in sig.output_specs],
            vals, calls)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_replayed_payload_is_executorchs_own_program(monkeypatch, name):
    factory, args_of, _ = MODELS[name]
    partitions = _partitions(monkeypatch, factory().eval(), args_of(0))
    assert partitions
    for gm in partitions:
        _assert_same_program(gm)


def test_lifted_partition_is_the_program_export_makes(monkeypatch):
    model = Decoder(layers=2).eval()
    (gm,) = _partitions(monkeypatch, model, model.example_args())
    exported = torch.export.export(copy.deepcopy(gm), example_args(gm), strict=False)
    assert _program_shape(lifted_program(gm)) == _program_shape(exported)


def test_decoder_payload_lowers_each_distinct_call_once(monkeypatch):
    """Two and six layers lower the same calls through ExecuTorch; the program is the same as
    lowering every node."""
    counts = []
    for layers in (2, 6):
        model = Decoder(layers=layers).eval()
        (gm,) = _partitions(monkeypatch, model, model.example_args())
        ep = torch.export.export(gm, example_args(gm), strict=False)
        calls = sum(1 for n in ep.graph.nodes if n.op == "call_function")
        counts.append(edge_replay.distinct_calls(ep))
        assert counts[-1] < calls / layers
        if layers == 2:
            _assert_same_program(gm)
    assert counts[0] == counts[1]


class _Scalars(torch.nn.Module):
    def forward(self, t, x):
        return t * 2, t * 2.0, t * True, x * 0.0, x * -0.0, x + 1, x + 1.5


def test_calls_differing_in_a_scalars_type_or_sign_lower_apart():
    args = (torch.arange(4), torch.ones(4))
    got = run_payload(_replayed(torch.export.export(_Scalars(), args)), list(args))
    want = _Scalars()(*args)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and torch.equal(g, w)
        assert torch.equal(torch.signbit(g), torch.signbit(w))


class _Item(torch.nn.Module):
    def forward(self, x, n):
        return x[: n.item()] * 2


def test_a_program_with_a_symbolic_value_takes_executorchs_whole_pipeline():
    args = (torch.ones(4), torch.tensor(2))
    ep = torch.export.export(_Item(), args)
    assert not edge_replay.replayable(ep)
    assert edge_replay.replayed_edge(ep, payload.edge_config()) is None
    assert lifted_program(torch.fx.symbolic_trace(_Item())) is None   # untraced: no values


class _Strided(torch.nn.Module):
    def forward(self, x):
        return x.as_strided((2, 2), (1, 2)) * 2


def test_a_call_reading_its_inputs_storage_offset_takes_executorchs_whole_pipeline():
    ep = torch.export.export(_Strided(), (torch.arange(8.0)[1:],))
    assert not edge_replay.replayable(ep)


class _WeightsOnly(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))

    def forward(self):
        return self.w * 2.5 + 1


def test_a_program_without_user_inputs_replays_with_its_constants_lifted():
    model = _WeightsOnly()
    got = run_payload(_replayed(torch.export.export(model, ())), [])
    assert torch.equal(got[0], model().detach())


def test_the_whole_pipeline_fallback_is_logged_with_its_reason(monkeypatch, caplog):
    """The fast lowering declining is never silent: `payload` logs (INFO, logger
    "torch_tensorrt_ext") which partition took ExecuTorch's whole pipeline and why; the fast path
    logs nothing."""
    import logging
    model = Decoder(layers=2).eval()
    (gm,) = _partitions(monkeypatch, model, model.example_args())
    with caplog.at_level(logging.INFO, logger="torch_tensorrt_ext"):
        payload.to_executorch_program(copy.deepcopy(gm))
        assert not [r for r in caplog.records if "whole to_edge" in r.getMessage()]
        monkeypatch.setattr(payload, "lifted_program", lambda _gm: None)
        payload.to_executorch_program(copy.deepcopy(gm))
    (record,) = [r for r in caplog.records if "whole to_edge" in r.getMessage()]
    assert record.getMessage().endswith(
        "lowered through torch.export and ExecuTorch's whole to_edge: it is not a static "
        "functional program (lifted_program)")


def _counting_to_edge(monkeypatch) -> list:
    import executorch.exir as exir
    calls, real = [], exir.to_edge
    monkeypatch.setattr(exir, "to_edge", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_calls_lowered_by_an_earlier_payload_are_not_lowered_again(monkeypatch):
    """A payload whose every call an earlier payload lowered (the next engine, the decode method)
    makes no `to_edge`; its program is the first's, byte for byte, and ExecuTorch's own. A payload
    adding one call lowers just that call."""
    model = Decoder(layers=2).eval()
    (gm,) = _partitions(monkeypatch, model, model.example_args())
    monkeypatch.setattr(edge_replay, "_LOWERED", type(edge_replay._LOWERED)())   # none kept
    lifted = lifted_program(copy.deepcopy(gm))
    lowered = _counting_to_edge(monkeypatch)
    first = _replayed(copy.deepcopy(lifted))
    assert len(lowered) == 1 and len(edge_replay._LOWERED) == edge_replay.distinct_calls(lifted)
    again = _replayed(copy.deepcopy(lifted))
    assert len(lowered) == 1 and again == first

    class OneMore(torch.nn.Module):      # a call the decoder never makes
        def forward(self, x):
            return x.cos()

    cos = torch.export.export(OneMore(), (torch.ones(3),))
    before = dict(edge_replay._LOWERED)
    _replayed(cos)
    assert len(lowered) == 2 and len(edge_replay._LOWERED) == len(before) + 1
    _assert_same_program(gm)             # the kept calls make ExecuTorch's own program


def test_a_call_keyed_by_an_objects_identity_is_not_kept():
    """An id can name another object once the first is gone: such a call lowers every time."""
    assert edge_replay._by_identity(("op", (("tuple", (("object", 140001),)),), ()))
    assert not edge_replay._by_identity(("op", (("float", "1.0"), ("int", 3)), ()))
