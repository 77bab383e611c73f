"""host_results: a partition's integer and view results no engine returns are computed by the
parent graph from results an engine can return, with the same values.

Found on ExecuTorch's Gemma 4 text decoder with its default cache and custom SDPA (run outside
the engines): the partitioner put `start + T` and the caches' prefixes `k[:, :start + T]` into
the partition around the cache write, and the reference builder refused them ("engine result 5
is the integer s70 + u5, which is no engine input's dimension"). The model itself:
`tests/e2e/test_executorch_decoder_methods.py::test_executorch_gemma4_...[narrow-custom]`.
"""
from __future__ import annotations

import operator

import torch
from torch.fx import Graph, GraphModule
from torch.fx.experimental.proxy_tensor import make_fx

from torch_tensorrt_ext.compiling.host_results import host_results

aten = torch.ops.aten


def _write_then_prefix(cache, k, start):
    """The cache written at `start` (T = k's length), its valid prefix `[:start + T]` viewed
    transposed, and `start + T` (what Gemma 4's custom SDPA reads)."""
    end = start + k.shape[1]
    new = aten.slice_scatter.default(cache, k, 1, start, end)
    return new, aten.slice.Tensor(new, 1, 0, end).transpose(1, 2), end, k * 2


def _prefix_computed(cache, k, start):   # a product over the prefix: no view chain
    end = start + k.shape[1]
    new = aten.slice_scatter.default(cache, k, 1, start, end)
    return new, aten.slice.Tensor(new, 1, 0, end) * 2


def _parent(part):
    """A parent calling partition `part` (traced with symbolic sizes, as torch-tensorrt's
    partitioner leaves it) and returning each of its results."""
    sub = make_fx(part, tracing_mode="symbolic")(torch.zeros(1, 16, 4), torch.ones(1, 3, 4), 2)
    g = Graph()
    call = g.call_module("_run_on_acc_0", tuple(g.placeholder(n) for n in ("cache", "k", "s")))
    n_out = len(sub.graph.output_node().args[0])
    g.output(tuple(g.call_function(operator.getitem, (call, i)) for i in range(n_out)))
    return GraphModule({"_run_on_acc_0": sub}, g), sub


def _returned(sub):
    return [n.name for n in sub.graph.output_node().args[0]]


def _calls():
    g = torch.Generator().manual_seed(0)
    for start, t in ((0, 5), (5, 1), (6, 4), (12, 4)):
        yield torch.randn(1, 16, 4, generator=g), torch.randn(1, t, 4, generator=g), start


def test_the_prefix_view_and_its_length_move_to_the_parent_with_the_same_values():
    parent, sub = _parent(_write_then_prefix)
    want = [parent(*a) for a in _calls()]
    host_results(parent)
    assert _returned(sub) == ["slice_scatter", "mul"]   # the base and the plain result
    moved = [n.target for n in parent.graph.nodes if n.op == "call_function"
             and n.target is not operator.getitem]
    assert moved == [aten.sym_size.int, operator.add, aten.slice.Tensor, aten.transpose.int]
    for a, w in zip(_calls(), want, strict=True):
        got = parent(*a)
        assert got[2] == w[2]
        for k in (0, 1, 3):
            torch.testing.assert_close(got[k], w[k], rtol=0, atol=0)
        assert got[1].data_ptr() == got[0].data_ptr()     # a view of the returned cache


def test_a_result_computed_over_the_prefix_stays_for_the_builder_to_refuse():
    parent, sub = _parent(_prefix_computed)
    code = parent.code
    before = _returned(sub)
    host_results(parent)
    assert _returned(sub) == before and parent.code == code
