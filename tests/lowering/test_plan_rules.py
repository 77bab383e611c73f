"""Each KV-vs-copy-back rule branch, on real modules exported with torch.export."""
from __future__ import annotations

import pytest
import torch

import torch_tensorrt_ext as tte
from plan_models import C4, Stateful, export, nest

KV, CB = tte.WriteKind.KV_ALIAS, tte.WriteKind.COPY_BACK
x1 = torch.ones(1, 2, 1, 4)
pos3 = torch.tensor([3])


def _slice_write(sl):
    def fn(m, x):
        m.cache[sl] = x
        return m.cache.sum()
    return fn


def _icopy(dim):
    def fn(m, x, p):
        m.cache.index_copy_(dim, p, x)
        return m.cache.sum()
    return fn


S = slice(None)


def _icopy_from(positions, start_first=False):
    """`cache.index_copy_(2, positions(T) + start, x)`, start read from `p` on the host (as
    ExecuTorch's llama's dynamic KVCache.update writes a prompt)."""
    def fn(m, x, p):
        start = p[0].item()
        torch._check(start >= 0)
        torch._check(start < 6)
        run = positions(x.size(2))
        m.cache.index_copy_(2, start + run if start_first else run + start, x)
        return m.cache.sum()
    return fn


def _iput(index_of):
    """`cache[:, :, index] = x` — ExecuTorch's default llama KV write (an index_put)."""
    def fn(m, x, p):
        m.cache[:, :, index_of(p)] = x
        return m.cache.sum()
    return fn
# id, module, args, {fqn: (kind, reason fragment)}
CASES = [
    ("slice_4d_dim2_one", Stateful(_slice_write((S, S, slice(2, 3), S)), cache=C4), (x1,),
     {"cache": (KV, "positions [2:3) along dim 2")}),
    ("slice_4d_dim2_three", Stateful(_slice_write((S, S, slice(2, 5), S)), cache=C4),
     (torch.ones(1, 2, 3, 4),), {"cache": (KV, "positions [2:5)")}),
    ("slice_4d_dim2_last", Stateful(_slice_write((S, S, slice(7, 8), S)), cache=C4), (x1,),
     {"cache": (KV, "[7:8)")}),
    ("index_copy_4d_dim2", Stateful(_icopy(2), cache=C4), (x1, pos3),
     {"cache": (KV, "index_copy of one position")}),
    ("index_copy_int64_cache", Stateful(_icopy(2), cache=(C4, torch.int64)),
     (torch.ones(1, 2, 1, 4, dtype=torch.int64), pos3), {"cache": (KV, "index_copy")}),
    ("index_copy_bf16_cache", Stateful(_icopy(2), cache=(C4, torch.bfloat16)),
     (torch.ones(1, 2, 1, 4, dtype=torch.bfloat16), pos3), {"cache": (KV, "index_copy")}),
    ("slice_batch2", Stateful(_slice_write((S, S, slice(1, 2), S)), cache=(2, 2, 8, 4)),
     (torch.ones(2, 2, 1, 4),), {"cache": (KV, "[1:2)")}),
    ("slice_rank3", Stateful(_slice_write((S, slice(2, 3), S)), cache=(2, 8, 4)),
     (torch.ones(2, 1, 4),), {"cache": (CB, "rank 3 cache [2,8,4]; KV update needs 4-D")}),
    ("index_copy_rank3", Stateful(_icopy(1), cache=(2, 8, 4)), (torch.ones(2, 1, 4), pos3),
     {"cache": (CB, "rank 3 cache")}),
    ("slice_rank5", Stateful(_slice_write((S, S, slice(2, 3))), cache=(1, 2, 8, 4, 2)),
     (torch.ones(1, 2, 1, 4, 2),), {"cache": (CB, "rank 5 cache")}),
    ("slice_dim1", Stateful(_slice_write((S, slice(0, 1))), cache=C4), (torch.ones(1, 1, 8, 4),),
     {"cache": (CB, "write dim is 1")}),
    ("slice_dim3", Stateful(_slice_write((S, S, S, slice(1, 2))), cache=C4),
     (torch.ones(1, 2, 8, 1),), {"cache": (CB, "write dim is 3")}),
    ("index_copy_dim1", Stateful(_icopy(1), cache=C4), (torch.ones(1, 1, 8, 4), torch.tensor([1])),
     {"cache": (CB, "write dim is 1")}),
    ("index_copy_dim3", Stateful(_icopy(3), cache=C4), (torch.ones(1, 2, 8, 1), torch.tensor([1])),
     {"cache": (CB, "write dim is 3")}),
    ("slice_strided", Stateful(_slice_write((S, S, slice(0, 8, 2), S)), cache=C4),
     (torch.ones(1, 2, 4, 4),), {"cache": (CB, "strided write (step 2)")}),
    ("slice_strided_3", Stateful(_slice_write((S, S, slice(1, 7, 3), S)), cache=C4),
     (torch.ones(1, 2, 2, 4),), {"cache": (CB, "strided write (step 3)")}),
    ("slice_open_ended", Stateful(_slice_write((S, S, slice(6, None), S)), cache=C4),
     (torch.ones(1, 2, 2, 4),), {"cache": (CB, "exceeds s_max 8")}),
    ("slice_negative_bounds", Stateful(_slice_write((S, S, slice(-3, -1), S)), cache=C4),
     (torch.ones(1, 2, 2, 4),), {"cache": (KV, "[5:7)")}),
    ("slice_negative_open", Stateful(_slice_write((S, S, slice(-1, None), S)), cache=C4),
     (x1,), {"cache": (CB, "exceeds s_max")}),
    ("slice_full_overwrite", Stateful(_slice_write((S, S, slice(0, 8), S)), cache=C4),
     (torch.ones(1, 2, 8, 4),), {"cache": (CB, "")}),
    ("index_copy_two_positions", Stateful(_icopy(2), cache=C4),
     (torch.ones(1, 2, 2, 4), torch.tensor([1, 2])),
     {"cache": (CB, "writes 2 positions (source [1,2,2,4]) at index 'args_1', which is not "
                    "arange(n) + start")}),
    # ExecuTorch llama's KVCache with enable_dynamic_shape: T positions from a runtime start
    ("index_copy_arange_plus_start", Stateful(_icopy_from(lambda n: torch.arange(n)), cache=C4),
     (torch.ones(1, 2, 3, 4), pos3),
     {"cache": (KV, "index_copy of 3 consecutive positions from a runtime start")}),
    ("index_copy_start_plus_arange_0_n", Stateful(_icopy_from(lambda n: torch.arange(0, n),
                                                              start_first=True), cache=C4),
     (torch.ones(1, 2, 3, 4), pos3), {"cache": (KV, "3 consecutive positions")}),
    ("index_copy_arange_from_1", Stateful(_icopy_from(lambda n: torch.arange(1, n + 1)),
                                          cache=C4),
     (torch.ones(1, 2, 3, 4), torch.tensor([2])), {"cache": (CB, "which is not arange(n)")}),
    ("index_copy_arange_step_2", Stateful(_icopy_from(lambda n: torch.arange(0, 2 * n, 2)),
                                          cache=C4),
     (torch.ones(1, 2, 3, 4), torch.tensor([1])), {"cache": (CB, "which is not arange(n)")}),
    ("index_copy_batch2", Stateful(_icopy(2), cache=(2, 2, 8, 4)),
     (torch.ones(2, 2, 1, 4), pos3), {"cache": (CB, "batch 2; the index_copy KV path")}),
    ("index_put", Stateful(lambda m, x, p: (m.cache.index_put_((p,), x), m.cache.sum())[1],
                           cache=(8, 4)), (torch.ones(1, 4), pos3),
     {"cache": (CB, "index_put into a cache of shape [8,4]; the KV form needs a static 4-D")}),
    ("index_put_4d_one_position", Stateful(_iput(lambda p: p), cache=C4), (x1, pos3),
     {"cache": (KV, "index_put of one position rewritten to index_copy along dim 2 of "
                    "[1,2,8,4] -> IKVCacheUpdateLayer")}),
    ("index_put_4d_broadcast_values", Stateful(_iput(lambda p: p), cache=C4),
     (torch.ones(1, 1, 1, 4), pos3), {"cache": (KV, "index_put of one position rewritten")}),
    ("index_put_4d_arange_run", Stateful(_iput(lambda p: torch.arange(2, 5)), cache=C4),
     (torch.ones(1, 2, 3, 4), pos3),
     {"cache": (KV, "index_put of positions [2:5) rewritten to slice_scatter along dim 2")}),
    ("index_put_4d_arange_whole", Stateful(_iput(lambda p: torch.arange(8)), cache=C4),
     (torch.ones(1, 2, 8, 4), pos3), {"cache": (CB, "a full overwrite of dim 2")}),
    ("index_put_4d_two_positions", Stateful(_iput(lambda p: p), cache=C4),
     (torch.ones(1, 2, 2, 4), torch.tensor([1, 2])),
     {"cache": (CB, "index_put of 2 runtime positions; only one position")}),
    ("index_put_4d_batch2", Stateful(_iput(lambda p: p), cache=(2, 2, 8, 4)),
     (torch.ones(2, 2, 1, 4), pos3), {"cache": (CB, "batch 2: the index_copy KV path")}),
    ("index_put_4d_dim1", Stateful(lambda m, x, p: (m.cache.__setitem__((S, p), x),
                                                    m.cache.sum())[1], cache=C4),
     (torch.ones(1, 1, 8, 4), torch.tensor([1])), {"cache": (CB, "does not index dim 2 alone")}),
    ("index_put_4d_accumulate", Stateful(
        lambda m, x, p: (m.cache.index_put_([torch.zeros_like(p), torch.zeros_like(p), p], x[0, 0],
                                            accumulate=True), m.cache.sum())[1], cache=C4),
     (x1, pos3), {"cache": (CB, "accumulate=True")}),
    ("ring_cat", Stateful(lambda m, x: (m.ring.copy_(torch.cat([m.ring[:, 1:], x], 1)),
                                        m.ring.sum())[1], ring=(4, 3)), (torch.ones(4, 1),),
     {"ring": (CB, "aten.cat.default")}),
    ("counter_add_", Stateful(lambda m, x: (m.count.add_(1), x + m.count)[1],
                              count=((1,), torch.int64)), (torch.ones(1),),
     {"count": (CB, "aten.add.Tensor")}),
    ("counter_iadd", Stateful(lambda m, x: _iadd(m, x), count=(1,)), (torch.ones(1),),
     {"count": (CB, "aten.add.Tensor")}),
    ("mul_", Stateful(lambda m, x: (m.s.mul_(x), m.s.sum())[1], s=(4,)), (torch.ones(4),),
     {"s": (CB, "aten.mul.Tensor")}),
    ("zero_", Stateful(lambda m, x: (m.s.zero_(), x + 1)[1], s=(4,)), (torch.ones(4),),
     {"s": (CB, "has no IKVCacheUpdateLayer converter")}),
    ("whole_copy", Stateful(lambda m, x: (m.s.copy_(x), x * 2)[1], s=(4,)), (torch.ones(4),),
     {"s": (CB, "")}),
    # replaced below
    ("read_after_write", Stateful(_read_after_write := None, cache=C4), (x1,), None),
]


def _iadd(m, x):
    m.count += x
    return m.count * 2


def _raw(m, x):
    m.cache[:, :, 4:5, :] = x
    return (m.cache * 2).sum(dim=2)


def _raw_old(m, x):
    before = m.cache.sum()
    m.cache[:, :, 4:5, :] = x
    return m.cache.sum() - before


CASES[-1] = ("read_after_write", Stateful(_raw, cache=C4), (x1,), {"cache": (KV, "[4:5)")})
CASES += [
    ("read_old_then_write", Stateful(_raw_old, cache=C4), (x1,), {"cache": (KV, "[4:5)")}),
    ("write_twice_slices", Stateful(lambda m, x: _twice(m, x), cache=C4), (x1,),
     {"cache": (CB, "not the buffer itself")}),
    ("write_twice_icopy_then_add", Stateful(lambda m, x, p: _icopy_add(m, x, p), cache=C4),
     (x1, pos3), {"cache": (CB, "aten.add.Tensor")}),
    ("clone_then_write", Stateful(lambda m, x: _clone_write(m, x), cache=C4), (x1,),
     {"cache": (KV, "[1:2)")}),
    ("two_buffers_kv_and_counter", Stateful(lambda m, x, p: _kv_and_count(m, x, p), cache=C4,
                                            n=((1,), torch.int64)), (x1, pos3),
     {"cache": (KV, "index_copy"), "n": (CB, "aten.add.Tensor")}),
    ("unmutated_buffer_absent", Stateful(lambda m, x: m.cache.sum() + x.sum(), cache=C4), (x1,),
     {}),
]


def _twice(m, x):
    m.cache[:, :, 0:1, :] = x
    m.cache[:, :, 1:2, :] = x * 2
    return m.cache.sum()


def _icopy_add(m, x, p):
    m.cache.index_copy_(2, p, x)
    m.cache.add_(1)
    return m.cache.sum()


def _clone_write(m, x):
    c = m.cache.clone()
    c[:, :, 1:2, :] = x
    m.cache.copy_(c)
    return c.sum()


def _kv_and_count(m, x, p):
    m.cache.index_copy_(2, p, x)
    m.n.add_(1)
    return m.cache.sum()


@pytest.mark.parametrize("name,module,args,expected", CASES, ids=[c[0] for c in CASES])
def test_rule(name, module, args, expected):
    plan = tte.plan_mutations(export(module, *args))
    assert set(plan.fqns) == set(expected), plan
    for fqn, (kind, fragment) in expected.items():
        w = plan[fqn]
        assert w.kind is kind, f"{fqn}: {w}"
        assert fragment in w.reason, w.reason


def test_non_persistent_buffer_is_planned():
    m = Stateful(_icopy(2))
    m.register_buffer("cache", torch.zeros(C4), persistent=False)
    plan = tte.plan_mutations(export(m, x1, pos3))
    assert plan["cache"].kind is KV


def test_negative_dim_is_not_normalised_like_the_converter():
    # The converter compares dim to 2 literally; -2 on a rank-4 cache is not aliased upstream.
    def fn(m, x):
        m.cache.copy_(torch.slice_scatter(m.cache, x, dim=-2, start=1, end=2))
        return m.cache.sum()
    plan = tte.plan_mutations(export(Stateful(fn, cache=C4), x1))
    w = plan["cache"]
    if "dim is -2" in w.reason:
        assert w.kind is CB
    else:  # torch normalised the dim during export: then it is an ordinary dim-2 write
        assert w.kind is KV and "[1:2)" in w.reason


def test_slice_end_past_s_max():
    def fn(m, x):
        m.cache.copy_(torch.ops.aten.slice_scatter.default(m.cache, x, 2, 6, 10))
        return m.cache.sum()
    plan = tte.plan_mutations(export(Stateful(fn, cache=C4), torch.ones(1, 2, 2, 4)))
    assert plan["cache"].kind is CB and "exceeds s_max 8" in plan["cache"].reason


def test_nested_three_deep_keeps_fqn():
    inner = Stateful(_icopy(2), cache=C4)
    plan = tte.plan_mutations(export(nest(inner, "a", "b", "c"), x1, pos3))
    assert plan.fqns == ("a.b.c.cache",)
    assert plan["a.b.c.cache"].kind is KV


def test_same_local_name_in_two_submodules():
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.left = Stateful(_icopy(2), cache=C4)
            self.right = Stateful(_icopy(1), cache=C4)

        def forward(self, x, y, p):
            return self.left(x, p) + self.right(y, p)
    plan = tte.plan_mutations(export(Two(), x1, torch.ones(1, 1, 8, 4), torch.tensor([1])))
    assert plan.kinds() == {"left.cache": KV, "right.cache": CB}
    assert "write dim is 1" in plan["right.cache"].reason


@pytest.mark.parametrize("excluded", ["aten.index_copy.default",
                                      "torch.ops.aten.index_copy.default",
                                      "aten.index_copy", torch.ops.aten.index_copy.default,
                                      torch.ops.aten.index_copy])
def test_torch_executed_ops_are_copy_back(excluded):
    ep = export(Stateful(_icopy(2), cache=C4), x1, pos3)
    assert tte.plan_mutations(ep)["cache"].kind is KV
    w = tte.plan_mutations(ep, torch_executed_ops=[excluded])["cache"]
    assert w.kind is CB and "in torch_executed_ops" in w.reason


def test_excluding_another_op_keeps_kv():
    ep = export(Stateful(_icopy(2), cache=C4), x1, pos3)
    assert tte.plan_mutations(ep, torch_executed_ops=["aten.add.Tensor"])["cache"].kind is KV


def test_dynamic_update_length_is_copy_back():
    def fn(m, x):
        m.cache[:, :, 0:x.shape[2], :] = x
        return m.cache.sum()
    seq = torch.export.Dim("seq", min=2, max=7)
    ep = export(Stateful(fn, cache=C4), torch.ones(1, 2, 3, 4),
                dynamic_shapes=(({2: seq},),))
    w = tte.plan_mutations(ep)["cache"]
    assert w.kind is CB and "dynamic slice bounds" in w.reason


def test_dynamic_index_copy_positions_is_copy_back():
    seq = torch.export.Dim("seq", min=2, max=7)
    ep = export(Stateful(_icopy(2), cache=C4), torch.ones(1, 2, 3, 4), torch.tensor([0, 1, 2]),
                dynamic_shapes=(({2: seq}, {0: seq}),))
    w = tte.plan_mutations(ep)["cache"]
    assert w.kind is CB and "positions" in w.reason
