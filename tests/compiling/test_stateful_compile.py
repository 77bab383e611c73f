"""The compile stage (`compiling.stateful_compile.StatefulCompile`): one plan and one lift, in
place; a KV write's read-after-write judged before lifting as after; a rebuild starts from the
record of the lifted graph; a buffer another method writes keeps its own input name."""
from __future__ import annotations

import copy
import dataclasses

import torch

import torch_tensorrt_ext as tte
from plan_models import C4, Stateful, decomposed_gm as _decomposed_gm

KV, CB = tte.WriteKind.KV_ALIAS, tte.WriteKind.COPY_BACK


def _reads_old_value_of_index_put(m, x, p):
    new = torch.ops.aten.index_put.default(m.k, [None, None, p], x)
    old = m.k.sum(dim=2)
    m.k.copy_(new)
    return old + new.sum(dim=2)


def test_read_after_write_is_judged_before_lifting_as_it_was_after():
    """The seam decides a KV write's read-after-write downgrade on the unlifted graph; that is
    the decision the lifted graph gives (every cache write into the buffer's input, the old
    value read after one) for every end-to-end model."""
    from e2e_models import MODELS
    from torch_tensorrt_ext.lowering.graph_writes import find_buffer_writes
    from torch_tensorrt_ext.lowering.kv_rules import INDEX_COPY, SLICE_SCATTER, read_after_write
    from torch_tensorrt_ext.compiling.planned_lift import stale_kv
    cases = {name: (factory(), args_of(0)) for name, (factory, args_of, _) in MODELS.items()}
    cases["index_put_read_after_write"] = (Stateful(_reads_old_value_of_index_put, k=C4),
                                           (torch.ones(1, 2, 1, 4), torch.tensor([3])))
    for name, (model, args) in sorted(cases.items()):
        gm = _decomposed_gm(model, *args)
        _, found = find_buffer_writes(gm)
        plan = tte.plan_mutations(gm)
        before = set(stale_kv(gm, found, plan))
        lifted = tte.lift_mutated_buffers(gm, plan)
        order = {n: i for i, n in enumerate(lifted.gm.graph.nodes)}
        phs = {n.name: n for n in lifted.gm.graph.nodes if n.op == "placeholder"}
        after = set()
        for w in plan.kv():
            ph = phs[lifted.placeholder_of(w.fqn)]
            writes = [u for u in ph.users if u.target in (SLICE_SCATTER, INDEX_COPY)
                      and u.args[0] is ph]
            if any(read_after_write(ph, write, order) for write in writes):
                after.add(w.fqn)
        assert before == after, name
        if name in ("reads_old_cache_after_write", "index_put_read_after_write"):
            assert before == {"k"}, name


def test_compile_seam_plans_and_lifts_once_in_place(monkeypatch):
    from e2e_models import MODELS
    from torch_tensorrt_ext.compiling import stateful_compile as seam
    from torch_tensorrt_ext.compiling import planned_lift
    calls = {"find": 0, "lift": 0}
    for name, real in (("find", planned_lift.find_buffer_writes),
                       ("lift", planned_lift.lift_writes)):
        def counted(*a, _name=name, _real=real, **k):
            calls[_name] += 1
            return _real(*a, **k)
        monkeypatch.setattr(planned_lift,
                            {"find": "find_buffer_writes", "lift": "lift_writes"}[name], counted)
    factory, args_of, _ = MODELS["reads_old_cache_after_write"]
    gm = _decomposed_gm(factory(), *args_of(0))
    sc = seam.StatefulCompile(gm)
    assert sc.gm is gm and calls == {"find": 1, "lift": 1}
    w = sc.plan["k"]
    assert w.kind is CB and w.reason.endswith(f"but {planned_lift.READS_OLD_CACHE}; copied back")
    value = gm.graph.output_node().args[0][sc.lifted.output_of("k")]
    assert value.target is torch.ops.aten.index_copy.default
    assert value.meta.get("_trt_no_kv_alias") is True


class _FoldedWeight(torch.nn.Module):
    """A KV cache next to a weight-only subgraph the build constant-folds (`_frozen_param`
    attributes the build then deletes from the lowered graph's module)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4, generator=torch.Generator().manual_seed(0)),
                                    requires_grad=False)
        self.register_buffer("k", torch.zeros(1, 2, 8, 4))

    def forward(self, x, p):
        y = x @ (self.w.t() * 2)
        self.k.index_copy_(2, p, y)
        return self.k.sum(2) + y.sum()


def test_a_rebuild_starts_from_the_lifted_graph_as_it_was_before_the_build(monkeypatch):
    """An engine rebuilt without aliasing (reconcile asks for it) is built from the record of
    the lifted graph — not from the graph the first build lowered and stripped of its folded
    constants, and without lifting again; every call still updates the cache like eager."""
    from rtx_env import engine_modules, torch_tensorrt_or_skip
    from torch_tensorrt_ext.compiling import stateful_compile as seam
    from torch_tensorrt_ext.compiling import planned_lift
    torch_tensorrt = torch_tensorrt_or_skip()
    real_reconcile, real_lift, lifts = seam.reconcile, planned_lift.lift_writes, []

    def asks_a_rebuild(plan, infos):
        out = real_reconcile(plan, infos)
        if not lifts[1:] and plan["k"].kind is KV:
            lifts.append("rebuild asked")
            return dataclasses.replace(out, rebuilds=(tte.RebuildRequest(
                infos[0].name, ("k",), "test: the engine has no output carrying it"),))
        return out

    def counted_lift(*a, **k):
        lifts.append("lift")
        return real_lift(*a, **k)
    monkeypatch.setattr(seam, "reconcile", asks_a_rebuild)
    monkeypatch.setattr(planned_lift, "lift_writes", counted_lift)
    model = _FoldedWeight().eval()
    args_of = lambda s: (torch.full((1, 2, 1, 4), s + 1.0), torch.tensor([s % 8]))  # noqa: E731
    ep = torch.export.export(copy.deepcopy(model), args_of(0))
    with tte.reference.engines():
        trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(args_of(0)),
                                     min_block_size=1)
    assert lifts == ["lift", "rebuild asked"]
    w = trt.mutation_plan["k"]
    assert w.kind is CB and "(engine rebuilt with the write excluded from aliasing)" in w.reason
    assert all(not m.aliased_io for m in engine_modules(trt).values())
    eager = copy.deepcopy(model)
    for step in range(4):
        with torch.no_grad():
            torch.testing.assert_close(trt(*args_of(step)), eager(*args_of(step)))
    torch.testing.assert_close(trt.get_buffer("k"), eager.k)



def _writes_a_reads_r(m, x):
    m.a.add_(x)
    return m.a * m.r


def test_read_only_state_is_lifted_and_keeps_its_own_input_name():
    """A buffer this program only reads is lifted too (another method may write it: no engine
    holds a snapshot of it); its input is `b_<fqn>` (an engine binding name) as for a written
    buffer — the name `ExportedProgram.module()` used for the input it unlifted is taken back,
    not suffixed."""
    from torch_tensorrt_ext.compiling import stateful_compile as seam
    gm = _decomposed_gm(Stateful(_writes_a_reads_r, a=(4,), r=(4,)), torch.ones(4))
    sc = seam.StatefulCompile(gm)
    assert sc.lifted.buffer_inputs == (("a", "b_a"), ("r", "b_r"))
    assert [n.name for n in sc.gm.graph.find_nodes(op="placeholder")] [1:] == ["b_a", "b_r"]
