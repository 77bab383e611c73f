"""`written_buffers` reads which buffers a program writes from the program as exported — the set
`plan_mutations` plans, without functionalizing a training-IR program — so a multi-method export
functionalizes each method once (in its compile), not twice. Checked against the plan on every
model of the lifting tests (e2e models, ExecuTorch's llama caches, transformers' static caches,
state on plain Python objects); the generated programs of the plan property tests check it too.
"""
from __future__ import annotations

import pytest
import torch

import torch_tensorrt_ext as tte
from torch_tensorrt_ext import reference
from torch_tensorrt_ext.lowering import graph_writes
from torch_tensorrt_ext.lowering.graph_writes import written_buffers

from e2e_models import MODELS
from lift_cases import CASES
from trace_counts import count_decompositions


@pytest.mark.parametrize("name", sorted(CASES))
def test_written_buffers_is_what_the_plan_plans(monkeypatch, name):
    ep, _ = CASES[name]()
    calls = count_decompositions(monkeypatch)
    written = written_buffers(ep)
    assert calls == []                       # read from the program as it is
    assert written == set(tte.plan_mutations(ep).fqns)


def test_a_higher_order_op_taking_a_buffer_is_functionalized_to_be_sure(monkeypatch):
    """What a higher-order op does with a buffer it takes is not read here: such a program is
    functionalized, whose signature says (here: `acc` is only read, `n` is written)."""
    class Branches(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("acc", torch.ones(2))
            self.register_buffer("n", torch.zeros(1))

        def forward(self, x):
            self.n.add_(1)
            return torch.cond(x.sum() > 0, lambda a: a * 2, lambda a: a - 1, (self.acc,))
    ep = torch.export.export(Branches(), (torch.ones(2),))
    cond = [n for n in ep.graph.nodes if n.target is torch.ops.higher_order.cond]
    assert len(cond) == 1 and "b_acc" in str(cond[0].args)   # the buffer itself goes in
    calls = count_decompositions(monkeypatch)
    assert written_buffers(ep) == {"n"} == set(tte.plan_mutations(ep).fqns)
    assert len(calls) == 1


def test_a_two_method_export_functionalizes_each_method_once(monkeypatch):
    """export_methods reads the written buffers from each exported program; the only
    functionalization left per method is its compile's."""
    factory, args_of, _ = MODELS["kv_index_copy"]
    model = factory().eval()
    exported = torch.export.export(model, args_of(0))
    calls = count_decompositions(monkeypatch)
    reference.export_methods({"forward": (exported, args_of(0)),
                              "again": (exported, args_of(1))})
    assert calls.count(exported) == 2        # once per method, by torch-tensorrt's compile


class NoGradState(torch.nn.Module):
    """LFM2's pattern: the state is written only inside `with torch.no_grad():` (a
    `wrap_with_set_grad_enabled` higher-order op taking the buffer, or a slice of it)."""

    def __init__(self, through_slice: bool):
        super().__init__()
        self.through_slice = through_slice
        self.register_buffer("state", torch.zeros(1, 4, 2))

    def forward(self, x):
        new = torch.cat([self.state, x], dim=-1)[..., -2:]
        with torch.no_grad():
            (self.state[:1] if self.through_slice else self.state).copy_(new)
        return new.sum(-1)


@pytest.mark.parametrize("through_slice", [False, True], ids=["buffer", "slice"])
def test_a_write_only_inside_no_grad_is_planned(through_slice):
    """Before, such a program was said to write nothing: `written_buffers` was empty and
    `plan_mutations` printed 'no buffer is mutated' (the higher-order op's buffer argument was
    only looked for inside lists)."""
    ep = torch.export.export(NoGradState(through_slice), (torch.ones(1, 4, 1),), strict=False)
    assert graph_writes.hides_writes(ep)
    assert written_buffers(ep) == {"state"}
    plan = tte.plan_mutations(ep)
    assert [(w.fqn, w.kind.name) for w in plan] == [("state", "COPY_BACK")]
