"""The same-value rewrites reach a `with torch.no_grad():` block's body (`lowering/subgraphs`),
and `stateful_program` makes them on a copy: the caller's exported program is left as it was.

torch.export keeps a `no_grad` block as a higher-order op whose body is a graph of its own; a
write to `buf[-1]` inside it reached torch-tensorrt's lowering as a `select_scatter` at -1, an
empty slice `[-1:0]` (the reference engine's kernel refused it; a TensorRT converter would write
nothing) — found by the generator's `no_grad` draws.
"""
from __future__ import annotations

import contextlib
import functools

import pytest
import torch
from torch import nn

from torch_tensorrt_ext.lowering.broadcast_writes import (broadcast_write_sites,
                                                          broadcast_write_values)
from torch_tensorrt_ext.lowering.negative_indices import (negative_index_sites,
                                                          normalize_select_scatter)
from torch_tensorrt_ext.lowering.subgraphs import copied, graphs
from torch_tensorrt_ext.compiling.stateful_compile import stateful_program


class _LastRowInNoGrad(nn.Module):
    """`buf[-1]` written in place and a 0-d `fill_`, in a `no_grad` block (or, with
    `block=False`, in the program's own graph: the rewrites then apply there)."""

    def __init__(self, block: bool = True):
        super().__init__()
        self.block = block
        self.lin = nn.Linear(8, 8)
        self.register_buffer("ema", torch.zeros(4, 8))
        self.register_buffer("f", torch.zeros(2, 8))

    def forward(self, x):
        y = self.lin(x)
        with torch.no_grad() if self.block else contextlib.nullcontext():
            self.ema[-1].mul_(0.9).add_(y.mean(0) * 0.1)
            self.f.fill_(y.mean())
        return y + self.ema.sum(0) + self.f.sum(0)


def _exported():
    torch.manual_seed(0)
    return torch.export.export(_LastRowInNoGrad().eval(), (torch.randn(2, 8),))


def _codes(gm) -> list[str]:
    return [g.code for g in graphs(gm)]


def _select_indices(gm) -> list[int]:
    return [n.args[2] for g in graphs(gm)
            for n in g.graph.find_nodes(op="call_function", target=torch.ops.aten.select.int)]


def test_the_block_is_a_graph_of_its_own_and_its_writes_are_rewritten_there():
    ep = _exported()
    gm = ep.graph_module
    assert len(list(graphs(gm))) == 2                      # the program's graph, the block's body
    assert not gm.graph.find_nodes(op="call_function", target=torch.ops.aten.select.int)
    assert _select_indices(gm) == [-1]
    negative, broadcast = negative_index_sites(gm), broadcast_write_sites(gm)
    assert len(negative) == 1 and len(broadcast) == 1      # found, nothing changed
    assert negative[0][0] != ""                            # in the block's body
    assert _select_indices(gm) == [-1]
    normalize_select_scatter(gm, negative)
    broadcast_write_values(gm, broadcast)
    assert _select_indices(gm) == [3]
    body = list(graphs(gm))[1].graph
    assert not body.find_nodes(op="call_function", target=torch.ops.aten.fill_.Tensor)
    assert negative_index_sites(gm) == () == broadcast_write_sites(gm)


def test_a_copy_is_edited_alone():
    ep = _exported()
    before = _codes(ep.graph_module)
    copy = copied(ep.graph_module)
    assert _codes(copy) == before
    sites = negative_index_sites(ep.graph_module)
    assert negative_index_sites(copy) == sites and len(sites) == 1   # the names survive copying
    normalize_select_scatter(copy, sites)
    assert _select_indices(copy) == [3]
    assert _codes(ep.graph_module) == before and _select_indices(ep.graph_module) == [-1]


@pytest.mark.parametrize("block", [True, False])
def test_stateful_program_leaves_the_callers_program_as_it_was(block):
    model = functools.partial(_LastRowInNoGrad, block)
    torch.manual_seed(0)
    ep = torch.export.export(model().eval(), (torch.randn(2, 8),))
    before, x = _codes(ep.graph_module), torch.randn(2, 8)
    assert len(negative_index_sites(ep.graph_module)) == 1
    state, writers = stateful_program(ep)
    assert _codes(ep.graph_module) == before
    assert set(writers) == {"ema", "f"}
    assert state is not ep
    # the caller's program still runs as exported; the one compile goes on with has no index
    # left to rewrite
    eager = model()
    eager.load_state_dict(ep.state_dict)
    want = eager(x)
    torch.testing.assert_close(ep.module()(x), want)
    assert negative_index_sites(state.graph_module) == ()
