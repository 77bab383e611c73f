"""Buffers of every layout a module registers — transposed, expanded (stride 0), a size-1 dimension
at another stride, sliced — read only or written, reach the engines row-major
(`lifted_graph.row_major`) and step like eager.

Since every buffer a program reads is lifted to an engine input (planned_lift), a read-only
buffer registered transposed (`torch.randint(..., (8, 64), dtype=torch.int8).t()`) reached
torch-tensorrt's inputs with its strides and was refused at compile: "Tensor does not have a
supported memory format, supported formats are contiguous or channel_last" — found by the
generator's `int_table` weights; a written buffer of such a layout the same.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn
from stateful_check import ModuleProgram, check_program

F = 8
LAYOUTS = {
    "transposed_int8": lambda: torch.randint(-3, 4, (F, 8 * F), dtype=torch.int8).t(),
    "expanded": lambda: torch.randn(1, F).expand(8 * F, F),
    "size1_strided": lambda: torch.randn(F, 8 * F).t()[:, :1].expand(8 * F, F),
    "sliced": lambda: torch.randn(8 * F, 2 * F)[:, ::2],
}


class _Layouts(nn.Module):
    """`table` (one layout, read only) and `ema` (registered transposed, written in place)."""

    def __init__(self, layout: str):
        super().__init__()
        self.lin = nn.Linear(F, F)
        self.register_buffer("table", LAYOUTS[layout](), persistent=False)
        self.register_buffer("ema", torch.randn(F, 8 * F).t())

    def forward(self, x):
        h = self.lin(x)
        self.ema.mul_(0.5).add_(h * 0.5)
        return h + h.repeat(1, 8) @ self.table.float() * 0.1 + self.ema.sum(0)


def _x(step):
    return (torch.randn(1, F, generator=torch.Generator().manual_seed(step)),)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_buffers_of_every_layout_compile_save_and_step_like_eager(layout):
    model = _Layouts(layout)
    assert model.table.stride() != torch.empty(model.table.shape).stride()   # not row-major
    assert not model.ema.is_contiguous()
    program = ModuleProgram(lambda: _Layouts(layout), _x, ("ema",))
    result = check_program(program, steps=3)
    assert result.ok, result.report(program)
