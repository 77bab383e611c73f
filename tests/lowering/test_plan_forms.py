"""plan_mutations on every program form, dynamic shapes in GraphModules, and bad input."""
from __future__ import annotations

import json

import pytest
import torch

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.demo.models import Decoder, export_decoder
from plan_models import C4, Stateful, export

KV, CB = tte.WriteKind.KV_ALIAS, tte.WriteKind.COPY_BACK


def _mixed(m, x, p):
    m.k[:, :, 2:3, :] = x
    m.v.index_copy_(2, p, x)
    m.ring.copy_(torch.cat([m.ring[:, :, 1:], x[0, :, 0, :].reshape(1, 4, 2)[:, :, :1]], dim=2))
    m.cnt.add_(1)
    return m.k.sum() + m.v.sum() + m.ring.sum()


def _mixed_ep():
    m = Stateful(_mixed, k=C4, v=C4, ring=(1, 4, 3), cnt=((1,), torch.int64))
    return export(m, torch.ones(1, 2, 1, 4), torch.tensor([3]))


def test_all_program_forms_agree():
    ep = _mixed_ep()
    forms = [ep, ep.run_decompositions({}), ep.module(), ep.run_decompositions({}).module()]
    plans = [tte.plan_mutations(f) for f in forms]
    expected = {"k": KV, "v": KV, "ring": CB, "cnt": CB}
    for p in plans:
        assert p.kinds() == expected
        assert [w.reason for w in p] == [w.reason for w in plans[0]]


def test_training_ir_keeps_inplace_ops_and_is_still_planned():
    ep = _mixed_ep()
    targets = {n.target for n in ep.graph.nodes}
    assert torch.ops.aten.index_copy_.default in targets  # torch 2.14 keeps in-place ops
    assert not any(s.kind.name == "BUFFER_MUTATION" for s in ep.graph_signature.output_specs)
    assert len(tte.plan_mutations(ep)) == 4


def test_plan_is_printable_and_json_round_trips():
    plan = tte.plan_mutations(export_decoder(layers=2))
    text = str(plan)
    assert "layers.1.attn.k_cache" in text and "KV_ALIAS" in text
    d = json.loads(plan.to_json())
    assert tte.MutationPlan.from_dict(d) == plan
    assert [w["fqn"] for w in d["writes"]] == list(plan.fqns)


def test_decoder_plan():
    plan = tte.plan_mutations(export_decoder(layers=3))
    assert len(plan) == 3 * 3 + 1
    for i in range(3):
        assert plan[f"layers.{i}.attn.k_cache"].kind is KV
        assert plan[f"layers.{i}.attn.v_cache"].kind is KV
        assert plan[f"layers.{i}.conv.state"].kind is CB
    assert plan["step"].kind is CB
    with pytest.raises(KeyError, match="'layers.9.attn.k_cache' is not written"):
        plan["layers.9.attn.k_cache"]


def _symbolic_cache_gm(cache_shape, dynamic_dims, write):
    """A functional GraphModule (get_attr cache + trailing copy_) whose cache val is symbolic,
    as a compiler sees a lifted cache with dynamic input specs."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
    mode = FakeTensorMode(shape_env=ShapeEnv())
    ctx = StatelessSymbolicContext(dynamic_sizes=[
        DimDynamic.DYNAMIC if i in dynamic_dims else DimDynamic.STATIC
        for i in range(len(cache_shape))])
    ep = export(Stateful(write, cache=cache_shape), torch.ones(1, 2, 1, 4), torch.tensor([1]))
    gm = ep.run_decompositions({}).module()
    # size 0/1 dims specialise: give the symbolic dim a size of 2 so it stays symbolic
    fake_shape = [2 if i in dynamic_dims and n < 2 else n for i, n in enumerate(cache_shape)]
    fake = mode.from_tensor(torch.zeros(fake_shape), symbolic_context=ctx)
    assert not all(isinstance(s, int) for s in fake.shape)
    for n in gm.graph.nodes:
        if n.op == "get_attr" and n.target == "cache":
            n.meta["val"] = fake
    return gm


def _icopy(m, x, p):
    m.cache.index_copy_(2, p, x)
    return m.cache.sum()


def _slice(m, x, p):
    m.cache[:, :, 1:2, :] = x
    return m.cache.sum()


@pytest.mark.parametrize("write", [_icopy, _slice])
@pytest.mark.parametrize("dims,what", [({0}, "batch"), ({2}, "s_max")])
def test_dynamic_cache_dims_are_copy_back(write, dims, what):
    gm = _symbolic_cache_gm(C4, dims, write)
    w = tte.plan_mutations(gm)["cache"]
    assert w.kind is CB
    assert "is dynamic; IKVCacheUpdateLayer needs a static s_max" in w.reason


def test_graph_module_without_meta_val_on_written_source_is_copy_back():
    ep = export(Stateful(_icopy, cache=C4), torch.ones(1, 2, 1, 4), torch.tensor([1]))
    gm = ep.run_decompositions({}).module()
    for n in gm.graph.nodes:
        if n.target is torch.ops.aten.index_copy.default:
            n.args[3].meta.pop("val", None)
    w = tte.plan_mutations(gm)["cache"]
    assert w.kind is CB and "has no meta['val']" in w.reason


def test_marker_forbids_aliasing():
    gm = export(Stateful(_icopy, cache=C4), torch.ones(1, 2, 1, 4),
                torch.tensor([1])).run_decompositions({}).module()
    for n in gm.graph.nodes:
        if n.target is torch.ops.aten.index_copy.default:
            n.meta["_trt_no_kv_alias"] = True
    w = tte.plan_mutations(gm)["cache"]
    assert w.kind is CB and "_trt_no_kv_alias" in w.reason


def test_buffer_mutated_under_cond_is_never_dropped():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("s", torch.zeros(4))

        def forward(self, x):
            def yes(x):
                self.s.add_(x)
                return x + 1

            def no(x):
                return x - 1
            return torch.cond(x.sum() > 0, yes, no, (x,))
    try:
        ep = torch.export.export(M(), (torch.ones(4),))
    except Exception as e:  # torch refuses: then nothing can be silently dropped downstream
        pytest.skip(f"torch.export rejects buffer mutation under cond: {type(e).__name__}")
    plan = tte.plan_mutations(ep)
    assert plan.fqns == ("s",) and plan["s"].kind is CB


def test_unknown_inplace_custom_op_is_copy_back():
    lib = torch.library.Library("tte_test", "FRAGMENT")
    lib.define("bump_(Tensor(a!) x) -> ()")

    @torch.library.impl(lib, "bump_", "CompositeExplicitAutograd")
    def bump_(x):
        x.add_(1)

    @torch.library.register_fake("tte_test::bump_", lib=lib)
    def _fake(x):
        return None

    def fn(m, x):
        torch.ops.tte_test.bump_(m.s)
        return m.s + x
    plan = tte.plan_mutations(export(Stateful(fn, s=(4,)), torch.ones(4)))
    assert plan.fqns == ("s",)
    w = plan["s"]
    assert w.kind is CB and w.op == "tte_test.bump_.default"
    assert w.reason == ("written in place by custom op tte_test.bump_.default (a torch.library op "
                        "whose schema mutates the buffer); it has no IKVCacheUpdateLayer "
                        "converter, so the new value is copied back")


def _foreach(m, x):
    torch._foreach_add_([m.a, m.b], [x, 2 * x])
    return m.a * m.b


def test_writes_through_a_list_argument_are_planned_in_every_form():
    """`_foreach_add_([a, b], ...)` writes two buffers through one list argument: both are
    planned whatever form the program comes in, and lifting gives eager's new values."""
    model = Stateful(_foreach, a=(4,), b=(4,))
    x = torch.arange(4.0)
    ep = export(model, x)
    forms = [ep, ep.module(), ep.run_decompositions({}), ep.run_decompositions({}).module()]
    for form in forms:
        assert tte.plan_mutations(form).kinds() == {"a": CB, "b": CB}, type(form).__name__
    lifted = tte.lift_mutated_buffers(ep, tte.plan_mutations(ep))
    out, *new = lifted.gm(x, *(lifted.initial_value(f) for f, _ in lifted.buffer_inputs))
    want = model(x)
    assert torch.equal(out, want)
    assert {f: new[i - 1] for f, i in lifted.buffer_outputs}.keys() == {"a", "b"}
    for fqn, i in lifted.buffer_outputs:
        assert torch.equal(new[i - 1], model.get_buffer(fqn)), fqn


def test_a_write_through_a_keyword_argument_is_planned():
    lib = torch.library.Library("tte_test_kw", "FRAGMENT")
    lib.define("fill_into(Tensor x, *, Tensor(a!) out) -> ()")

    @torch.library.impl(lib, "fill_into", "CompositeExplicitAutograd")
    def fill_into(x, *, out):
        out.copy_(x)

    @torch.library.register_fake("tte_test_kw::fill_into", lib=lib)
    def _fake(x, *, out):
        return None

    def fn(m, x):
        torch.ops.tte_test_kw.fill_into(x, out=m.s)
        return m.s + 1
    ep = export(Stateful(fn, s=(4,)), torch.ones(4))
    node = next(n for n in ep.graph.nodes if n.target is torch.ops.tte_test_kw.fill_into.default)
    assert "out" in node.kwargs          # the written tensor really is passed by keyword
    plan = tte.plan_mutations(ep)
    assert plan.fqns == ("s",) and plan["s"].kind is CB


def test_not_a_program_is_refused():
    with pytest.raises(tte.PlanError, match="takes an ExportedProgram or a GraphModule"):
        tte.plan_mutations(Decoder(layers=1))


def test_graph_module_inplace_without_meta_is_a_clear_error():
    ep = export(Stateful(_icopy, cache=C4), torch.ones(1, 2, 1, 4), torch.tensor([1]))
    gm = ep.module()  # training IR: index_copy_ on the get_attr, needs re-export
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            n.meta.pop("val", None)
    with pytest.raises(tte.PlanError, match="GraphModule input 'args_0' has no tensor meta"):
        tte.plan_mutations(gm)
