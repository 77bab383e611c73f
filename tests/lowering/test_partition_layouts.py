"""What a partition hands ExecuTorch, made acceptable before it is lowered:

* `lowering.empty_cat`: a `cat` onto transformers' legacy empty cache tensor (`torch.tensor([])`,
  T5/BART/Whisper cross-attention) loses that operand — the same values — so the cat is not left
  on the host with an empty constant ExecuTorch 1.5.1 cannot load;
* `engines.payload.dense_constants` / `engines.kernel_forms.is_dense`: a constant torch-tensorrt
  froze from an `expand` (stride 0, Mamba2's `A`, `D`, `dt_bias`) and a value whose size-1
  dimension has an odd stride (ExecuTorch reads a dim order from the strides alone) are made
  row-major, values unchanged.
"""
from __future__ import annotations

import torch

from torch_tensorrt_ext.engines.kernel_forms import is_dense
from torch_tensorrt_ext.engines.payload import dense_constants
from torch_tensorrt_ext.lowering.empty_cat import drop_empty_cat_operands, empty_cat_sites


class _CatOntoEmpty(torch.nn.Module):
    def forward(self, x):
        return torch.cat([torch.tensor([]), x], dim=-2) * 2


class _CatSameRank(torch.nn.Module):
    def forward(self, x):
        return torch.cat([x.new_zeros(0), x.flatten()])


def _cats(gm):
    return list(gm.graph.find_nodes(op="call_function", target=torch.ops.aten.cat.default))


def test_a_cat_onto_a_legacy_empty_tensor_loses_that_operand_and_keeps_its_values():
    x = torch.randn(1, 2, 3, 4)
    ep = torch.export.export(_CatOntoEmpty(), (x,), strict=False)
    gm = ep.graph_module
    assert len(_cats(gm)[0].args[0]) == 2
    sites = empty_cat_sites(gm)
    assert len(sites) == 1
    drop_empty_cat_operands(gm, sites)
    (cat,) = _cats(gm)
    assert len(cat.args[0]) == 1 and tuple(cat.args[0][0].meta["val"].shape) == (1, 2, 3, 4)
    torch.testing.assert_close(ep.module()(x), x * 2)
    assert empty_cat_sites(gm) == ()   # nothing left to drop


def test_a_cat_of_tensors_of_one_rank_is_left_alone():
    x = torch.randn(2, 3)
    gm = torch.export.export(_CatSameRank(), (x,), strict=False).graph_module
    before = [len(c.args[0]) for c in _cats(gm)]
    assert empty_cat_sites(gm) == ()
    assert [len(c.args[0]) for c in _cats(gm)] == before


def test_dense_means_row_major_strides_size_one_dimensions_included():
    assert is_dense(torch.empty(1, 4, 1, 16))
    odd = torch.empty(1, 4, 16).as_strided((1, 4, 1, 16), (64, 16, 64, 1))
    assert odd.is_contiguous() and not is_dense(odd)   # contiguous to PyTorch, not to ExecuTorch
    assert not is_dense(torch.empty(4, 1).expand(4, 16))


def test_a_frozen_expanded_constant_and_its_recorded_value_become_row_major():
    from torch._subclasses.fake_tensor import FakeTensorMode
    a = torch.arange(4.0).reshape(4, 1).expand(4, 16)        # stride (1, 0)
    gm = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    gm.register_parameter("frozen", torch.nn.Parameter(a, requires_grad=False))
    x = gm.graph.placeholder("x")
    c = gm.graph.get_attr("frozen")
    gm.graph.output(gm.graph.call_function(torch.ops.aten.add.Tensor, (x, c)))
    with FakeTensorMode() as mode:
        c.meta["val"] = mode.from_tensor(a)
    gm.recompile()
    assert c.meta["val"].stride() == (1, 0)
    dense_constants(gm)
    assert gm.frozen.stride() == (16, 1) and c.meta["val"].stride() == (16, 1)
    torch.testing.assert_close(gm.frozen, a)
    torch.testing.assert_close(gm(torch.ones(4, 16)), a + 1)
