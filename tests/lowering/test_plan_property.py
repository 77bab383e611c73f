"""Property: for random stateful modules, the plan holds exactly the buffers eager mutates."""
from __future__ import annotations

import copy

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.lowering.graph_writes import written_buffers

# write kind -> (buffer shape, function writing it from x [1,2,1,4] and p int64[1])
WRITES = {
    "none": ((1, 2, 8, 4), lambda b, x, p, pos: None),
    "add_": ((3,), lambda b, x, p, pos: b.add_(1)),
    "mul_add": ((3,), lambda b, x, p, pos: b.mul_(2).add_(1)),
    "index_copy_kv": ((1, 2, 8, 4), lambda b, x, p, pos: b.index_copy_(2, p, x)),
    "slice_kv": ((1, 2, 8, 4), lambda b, x, p, pos: b[:, :, pos:pos + 1, :].copy_(x)),
    "slice_rank3": ((2, 8, 4), lambda b, x, p, pos: b[:, pos:pos + 1, :].copy_(x[0])),
    "strided": ((1, 2, 8, 4), lambda b, x, p, pos: b[:, :, 0:8:4, :].copy_(x.expand(1, 2, 2, 4))),
    "index_put": ((8, 4), lambda b, x, p, pos: b.index_put_((p,), x[0, 0])),
    "ring": ((2, 4), lambda b, x, p, pos: b.copy_(torch.cat([b[:, 1:], x[0, :, 0, :1]], 1))),
    "twice": ((1, 2, 8, 4), lambda b, x, p, pos: (b[:, :, 0:1].copy_(x), b[:, :, 1:2].copy_(x))),
}


class Leaf(torch.nn.Module):
    def __init__(self, kinds, pos):
        super().__init__()
        self.kinds, self.pos = kinds, pos
        for i, k in enumerate(kinds):
            self.register_buffer(f"b{i}", torch.zeros(WRITES[k][0]))

    def forward(self, x, p):
        total = x.sum()
        for i, k in enumerate(self.kinds):
            buf = getattr(self, f"b{i}")
            WRITES[k][1](buf, x, p, self.pos)
            total = total + buf.sum()
        return total


class Node(torch.nn.Module):
    def __init__(self, children):
        super().__init__()
        self.kids = torch.nn.ModuleList(children)

    def forward(self, x, p):
        return sum(c(x, p) for c in self.kids)


leaf = st.builds(Leaf, st.lists(st.sampled_from(sorted(WRITES)), min_size=1, max_size=3),
                 st.integers(0, 6))
tree = st.recursive(leaf, lambda kids: st.lists(kids, min_size=1, max_size=2).map(Node),
                    max_leaves=4)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree)
def test_plan_is_exactly_the_mutated_buffers(model):
    x, p = torch.ones(1, 2, 1, 4), torch.tensor([3])
    before = {n: b.clone() for n, b in model.named_buffers()}
    expected = set()
    for name, mod in model.named_modules():
        if isinstance(mod, Leaf):
            expected |= {f"{name}.b{i}".lstrip(".") for i, k in enumerate(mod.kinds) if k != "none"}
    ep = torch.export.export(copy.deepcopy(model).eval(), (x, p))
    model(x, p)
    changed = {n for n, b in model.named_buffers() if not torch.equal(b, before[n])}
    assert changed == expected  # the generator's writes are all observable
    assert written_buffers(ep) == expected   # read without functionalizing
    plan = tte.plan_mutations(ep)
    assert set(plan.fqns) == expected
    for w in plan:
        kind = dict(model.named_modules())[w.fqn.rpartition(".")[0]].kinds[int(w.fqn[-1])] \
            if "." in w.fqn else model.kinds[int(w.fqn[-1])]
        assert w.is_kv == (kind in ("index_copy_kv", "slice_kv")), (w.fqn, kind, w.reason)
