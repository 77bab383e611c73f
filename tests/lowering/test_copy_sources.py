"""Buffers copied whole from one value (`lowering/copy_sources.py`).

torch.export keeps `buf.copy_(src)` in place; functionalization (`run_decompositions`, run by
torch-tensorrt's compile and by ExecuTorch's `to_edge`) refuses its own result when two writes
end on one node. Each shape below is refused by plain `run_decompositions` (asserted, so the test
shows the failure it guards against), then compiles, saves and steps like eager through
torch_tensorrt (compiled module and `.pte`), and the pass clones only where a source is shared.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn
from stateful_check import ModuleProgram, check_program

from torch_tensorrt_ext.lowering.copy_sources import own_copy_sources, shared_copy_sources


class _Copies(nn.Module):
    """Buffers a, b, c [1, 8] (c never written), a parameter w; `how` picks the writes."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.lin = nn.Linear(8, 8)
        self.w = nn.Parameter(torch.randn(1, 8))
        for name in "abc":
            self.register_buffer(name, torch.randn(1, 8))

    def forward(self, x):
        h = self.lin(x)
        if self.how == "two_from_input":
            self.a.copy_(x)
            self.b.copy_(x)
        elif self.how == "two_from_computed":
            self.a.copy_(h)
            self.b.copy_(h)
        elif self.how == "two_from_an_unwritten_buffer":
            self.a.copy_(self.c)
            self.b.copy_(self.c)
        elif self.how == "two_from_a_parameter":
            self.a.copy_(self.w)
            self.b.copy_(self.w)
        elif self.how == "one_from_anothers_new_value":      # b's new value feeds a's write
            self.b.add_(h)
            self.a.copy_(self.b)
        elif self.how == "one_from_an_in_place_result":
            self.a.copy_(self.b.mul_(0.5))
        elif self.how == "one_from_an_unwritten_buffer":     # lost downstream, not refused here
            self.a.copy_(self.c)
        elif self.how == "two_from_input_through_aliases":   # `.float()` of a float buffer is
            self.a.float().copy_(x)                          # the buffer: found by the emulated
            self.b.float().copy_(x.float())                  # generator run (seed 32000)
        elif self.how == "two_from_an_aliased_unwritten_buffer":
            self.a.float().copy_(self.c.float())
            self.b.copy_(self.c)
        return self.lin(h + self.a + self.b)


SHAPES = {"two_from_input": 1, "two_from_computed": 1, "two_from_an_unwritten_buffer": 2,
          "two_from_a_parameter": 1, "one_from_anothers_new_value": 1,
          "one_from_an_in_place_result": 1, "one_from_an_unwritten_buffer": 1,
          "two_from_input_through_aliases": 1, "two_from_an_aliased_unwritten_buffer": 2}
# shape -> clones the pass adds


def _x(step):
    return (torch.randn(1, 8, generator=torch.Generator().manual_seed(step)),)


@pytest.mark.parametrize("how", sorted(SHAPES))
def test_plain_functionalization_refuses_it_and_the_pass_clones_only_the_shared_source(how):
    torch.manual_seed(0)
    ep = torch.export.export(_Copies(how), _x(0))
    if how != "one_from_an_unwritten_buffer":
        with pytest.raises(Exception, match="is not in the correct order or is not found"):
            ep.run_decompositions({})
    ep = torch.export.export(_Copies(how), _x(0))
    sites = shared_copy_sources(ep)
    assert len(sites) == SHAPES[how]
    own_copy_sources(ep, sites)
    functional = ep.run_decompositions({})
    written = {"a"} if how == "one_from_an_unwritten_buffer" else {"a", "b"}
    assert set(functional.graph_signature.buffers_to_mutate.values()) == written
    module = ep.module()
    torch.manual_seed(0)
    want = _Copies(how)
    module.load_state_dict(want.state_dict())
    for step in range(3):
        torch.testing.assert_close(module(*_x(step)), want(*_x(step)))
        for name in "abc":
            torch.testing.assert_close(getattr(module, name), getattr(want, name))


def test_a_ring_copied_from_its_own_new_value_gets_no_clone():
    class Ring(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("ring", torch.zeros(1, 8, 4))

        def forward(self, x):
            self.ring.copy_(torch.cat([self.ring[..., 1:], x.unsqueeze(-1)], -1))
            return self.ring.sum(-1)
    ep = torch.export.export(Ring(), _x(0))
    assert shared_copy_sources(ep) == ()


@pytest.mark.emulated_device
@pytest.mark.parametrize("how", sorted(SHAPES))
def test_it_compiles_saves_and_steps_like_eager(how):
    written = ("a",) if how == "one_from_an_unwritten_buffer" else ("a", "b")
    program = ModuleProgram(lambda: _Copies(how), _x, written)
    result = check_program(program, steps=3)
    assert result.ok, result.report(program)
