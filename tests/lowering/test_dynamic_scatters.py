"""`lowering.dynamic_scatters`: a scatter-add whose index has a symbolic size becomes an
accumulating `index_put` (torch-tensorrt's decomposition would unroll it over the length and
specialize it); a static one is left as it is; another reduction over a dynamic length is
refused naming the node."""
from __future__ import annotations

import copy

import pytest
import torch
from dynamic_models import ScatterPrefill, prefill_args, prefill_dims

from torch_tensorrt_ext.errors import Unsupported
from torch_tensorrt_ext.lowering.dynamic_scatters import (accumulate_dynamic_scatters,
                                                          dynamic_scatter_sites)

_aten = torch.ops.aten


def _targets(ep):
    return [n.target for n in ep.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("op, before, after", [
    ("scatter_add", _aten.scatter_add_.default, _aten.index_put_.default),
    ("scatter_add_functional", _aten.scatter_add.default, _aten.index_put.default),
    ("scatter_reduce_sum", _aten.scatter_reduce_.two, _aten.index_put_.default)])
def test_a_dynamic_scatter_add_becomes_an_accumulating_index_put_of_the_same_values(
        op, before, after):
    model = ScatterPrefill(op).eval()
    eager = copy.deepcopy(model)
    ep = torch.export.export(model, prefill_args(4), dynamic_shapes=prefill_dims())
    sites = dynamic_scatter_sites(ep.graph_module)
    assert len(sites) == 1
    assert before in _targets(ep)
    accumulate_dynamic_scatters(ep.graph_module, sites)
    (put,) = [n for n in ep.graph.nodes if n.target is after]
    assert before not in _targets(ep) and put.args[3] is True
    rewritten = ep.module()
    for t, start in ((1, 2), (5, 0), (9, 3)):    # overlapping positions accumulate
        x, pos = prefill_args(t, start)
        with torch.no_grad():
            torch.testing.assert_close(rewritten(x, pos), eager(x, pos))
        torch.testing.assert_close(rewritten.acc, eager.acc)


def test_a_static_scatter_add_is_left_to_torch_tensorrt():
    static = torch.export.export(ScatterPrefill("scatter_add").eval(), prefill_args(4))
    assert dynamic_scatter_sites(static.graph_module) == ()


def test_another_reduction_over_a_dynamic_length_is_refused_naming_the_node():
    """torch-tensorrt would unroll it and fix the length to the example's (a reference engine
    then refused "engine binding 'pos' has dimension 0 = 4")."""

    class Amax(ScatterPrefill):
        def forward(self, x, pos):
            rows = pos.view(1, -1, 1).expand(1, pos.shape[0], 8)
            self.acc.scatter_reduce_(1, rows, self.proj(x), "amax")
            return self.acc.sum()

    amax = torch.export.export(Amax().eval(), prefill_args(4), dynamic_shapes=prefill_dims())
    with pytest.raises(Unsupported) as e:
        dynamic_scatter_sites(amax.graph_module)
    assert str(e.value) == (
        "node 'scatter_reduce_': scatter_reduce(reduce='amax', include_self=True) over an index "
        "of dynamic size [1, s11, 8]: torch-tensorrt 2.14.0 unrolls scatter_reduce over the "
        "index's length, which fixes the length to the example's; only a sum including the "
        "input is rewritten (as an accumulating index_put). Export this write with a static "
        "length, or write it as a sum (scatter_add_)")
