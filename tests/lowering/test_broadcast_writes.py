"""A buffer written from a value that broadcasts (or converts) into it, read back
in the same call (`lowering/broadcast_writes.py`).

`b.copy_(h.mean(1))` with `h.mean(1)` `[1, D]` and `b` `[4, D]`, then `b.sum(0)`: plain
`run_decompositions` makes the narrow source the buffer's new value (asserted below, so the test
shows what it guards against) and the read computes on it — wrong numbers in the compiled
module and the `.pte` (max diff 2.36 in the issue), `b[1]` / `b.mean(-2)` an IndexError at
compile; a 0-d source or `fill_` the same, a float source into a bf16 buffer read back as float.
Each source below — every rank, 0-d included, and a dtype conversion — compiles, saves and steps
like eager, state and every read.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn
from stateful_check import ModuleProgram, check_program

from torch_tensorrt_ext.lowering.broadcast_writes import (broadcast_write_sites,
                                                          broadcast_write_values)

D = 8
# source -> (the value written into b [4, D] from h [1, 3, D], b's dtype)
SOURCES = {
    "row": (lambda h: h.mean(1), torch.float32),                        # [1, D]
    "vector": (lambda h: h.mean((0, 1)), torch.float32),                # [D]
    "scalar": (lambda h: h.mean(), torch.float32),                      # []
    "column": (lambda h: h[0, :1, :1], torch.float32),                  # [1, 1]
    "rows_4d": (lambda h: h.mean(1, keepdim=True)[0], torch.float32),   # [1, D] via 3-d
    "float_into_bf16": (lambda h: h.mean(1), torch.bfloat16),           # converts and widens
    "float_into_int32": (lambda h: (h * 10).mean(1), torch.int32),
    "same_shape_into_bf16": (lambda h: h[0, :1].expand(4, D) * 2, torch.bfloat16),
    "fill_scalar": (None, torch.float32),                               # b.fill_(h.mean())
}


class _Broadcast(nn.Module):
    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.register_buffer("b", torch.zeros(4, D, dtype=SOURCES[how][1]))

    def forward(self, h):
        source = SOURCES[self.how][0]
        if source is None:
            self.b.fill_(h.mean())
        else:
            self.b.copy_(source(h))
        b = self.b.float()
        return b.sum(0), b[1], b.mean(-2), self.b


def _h(step):
    return (torch.randn(1, 3, D, generator=torch.Generator().manual_seed(step)),)


@pytest.mark.parametrize("how", sorted(SOURCES))
def test_plain_functionalization_reads_the_narrow_value_and_the_pass_widens_it(how):
    """The rewrite is the fix's whole depth: plain `run_decompositions` computes the reads on the
    source as it is (a wrong value, or a read that fails on the narrow one); after
    `broadcast_write_values` the same function gives eager's values. (Plain functionalization
    keeps a `fill_`'s broadcast; torch-tensorrt's lowering loses it — the compile test's.)"""
    if how != "fill_scalar":
        plain = torch.export.export(_Broadcast(how), _h(0)).run_decompositions({}).module()
        with pytest.raises((AssertionError, IndexError, RuntimeError)):
            for got, exp in zip(plain(*_h(0)), _Broadcast(how)(*_h(0)), strict=True):
                torch.testing.assert_close(got, exp)
    ep = torch.export.export(_Broadcast(how), _h(0))
    sites = broadcast_write_sites(ep.graph_module)
    assert len(sites) == 1
    broadcast_write_values(ep.graph_module, sites)
    assert broadcast_write_sites(ep.graph_module) == ()   # nothing left to widen
    module = ep.run_decompositions({}).module()
    eager = _Broadcast(how)
    for step in range(2):
        for got, exp in zip(module(*_h(step)), eager(*_h(step)), strict=True):
            assert got.shape == exp.shape and got.dtype == exp.dtype
            torch.testing.assert_close(got, exp)


def test_a_value_of_the_buffers_shape_and_dtype_is_left_as_it_is():
    class Same(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.zeros(1, D))

        def forward(self, h):
            self.b.copy_(h.mean(1))
            return self.b.sum(0)
    assert broadcast_write_sites(torch.export.export(Same(), _h(0)).graph_module) == ()


@pytest.mark.parametrize("how", sorted(SOURCES))
def test_it_compiles_saves_and_steps_like_eager(how):
    program = ModuleProgram(lambda: _Broadcast(how), _h, ("b",))
    result = check_program(program, steps=3)
    assert result.ok, result.report(program)
