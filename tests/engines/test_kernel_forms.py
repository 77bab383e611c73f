"""A one-op reference engine returns eager's values for the calls ExecuTorch lowers or runs
otherwise than ATen (found by scripts/converter_coverage.py): a call ExecuTorch removes as a
no-op, leaving an output that is the input (it came back as zeros); an output returned twice;
an int32 index of gather/scatter (the kernels refused it, error 0x12); an integer remainder by a
negative divisor (ExecuTorch's kernel gave the dividend's sign: 5 % -3 was 2); a sum over a dim
or a cumsum of a 0-d tensor (the sum aborted the process)."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx import Graph, GraphModule
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from converter_ops import Case, one_op_partition
from torch_tensorrt_ext.engines.payload import kernel_forms
from torch_tensorrt_ext.seams.engine_kind import build_reference_engine

aten = torch.ops.aten
X = torch.arange(-6.0, 6.0).reshape(3, 4) / 4
I32 = torch.tensor([[0, 2, 1, 0], [2, 2, 0, 1]], dtype=torch.int32)
A = torch.tensor([5, -7, 3, -4, 9, 0, -1, 7], dtype=torch.int32)
B = torch.tensor([-3, -3, 2, 3, -2, -5, 4, -7], dtype=torch.int32)

CALLS = {
    "to_copy_same_dtype": (aten._to_copy.default, (X,), {"dtype": torch.float32}),
    "whole_slice": (aten.slice.Tensor, (X, 0), {}),
    "gather_int32_index": (aten.gather.default, (X, 0, I32), {}),
    "scatter_int32_index": (aten.scatter.src, (X, 0, I32, -X[:2]), {}),
    "scatter_add_int32_index": (aten.scatter_add.default, (X, 0, I32, -X[:2]), {}),
    "index_select_int32": (aten.index_select.default, (X, 1, I32[0]), {}),
    "int_remainder_negative_divisor": (aten.remainder.Tensor, (A, B), {}),
    "int_remainder_by_a_0d_tensor": (aten.remainder.Tensor,
                                     (A, torch.tensor(-3, dtype=torch.int32)), {}),
    # a 0-d tensor reduced over its dim: ExecuTorch's float sum aborted the process (the
    # converter coverage run's one crash), its cumsum failed with 0x12
    "sum_0d_over_dim_0_keepdim": (aten.sum.dim_IntList, (torch.tensor(1.5), [0], True), {}),
    "sum_0d_over_dim_minus_1": (aten.sum.dim_IntList, (torch.tensor(-2.25), [-1]), {}),
    "sum_0d_dim_and_keepdim_by_name": (aten.sum.dim_IntList, (torch.tensor(1.5),),
                                       {"dim": [0], "keepdim": True}),
    "cumsum_0d_dim_by_name": (aten.cumsum.default, (torch.tensor(1.25),), {"dim": 0}),
    "sum_0d_over_no_dim_to_half": (aten.sum.dim_IntList, (torch.tensor(0.75), []),
                                   {"dtype": torch.float16}),
    "sum_0d_bf16_over_dim_0": (aten.sum.dim_IntList,
                               (torch.tensor(3.5, dtype=torch.bfloat16), [0]), {}),
    "cumsum_0d": (aten.cumsum.default, (torch.tensor(1.25), 0), {}),
    # a half-precision running sum: ATen accumulates in fp32 (64 × 0.1 in bf16 ends at
    # 6.40625), ExecuTorch's kernel in the input's dtype (6.15625)
    "cumsum_bf16_accumulates_in_fp32": (aten.cumsum.default,
                                        (torch.full((2, 64), 0.1, dtype=torch.bfloat16), 1), {}),
    "cumsum_fp16_accumulates_in_fp32": (aten.cumsum.default,
                                        (torch.linspace(-3, 5, 300).to(torch.float16), 0), {}),
    "cumsum_0d_int_to_int64": (aten.cumsum.default, (torch.tensor(7, dtype=torch.int32), -1), {}),
}


def _run(gm, inputs):
    out = build_reference_engine(gm)(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("name", sorted(CALLS))
def test_one_op_engine_returns_eagers_values(name):
    op, args, kwargs = CALLS[name]
    gm, inputs = one_op_partition(Case(op, args, kwargs, name))
    (got,) = _run(gm, inputs)
    want = op(*args, **kwargs)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_an_output_returned_twice_is_returned_twice():
    g = Graph()
    x = g.placeholder("x")
    r = g.call_function(aten.relu.default, (x,))
    g.output((r, r, x))
    gm = GraphModule(torch.nn.Module(), g)
    mode = FakeTensorMode()
    FakeTensorProp(gm, mode).propagate(mode.from_tensor(X))
    got = _run(gm, [X])
    assert [torch.equal(t, w) for t, w in zip(got, [X.relu(), X.relu(), X], strict=True)] == \
        [True] * 3


def test_kernel_forms_leaves_calls_executorch_takes_alone():
    gm, _ = one_op_partition(Case(aten.gather.default, (X, 0, I32.long()), {}, "i64"))
    before = [n.target for n in gm.graph.nodes]
    kernel_forms(gm)
    assert [n.target for n in gm.graph.nodes] == before
    gm, _ = one_op_partition(Case(aten.gather.default, (X, 0, I32), {}, "i32"))
    kernel_forms(gm)
    assert aten._to_copy.default in [n.target for n in gm.graph.nodes]
