"""lift_mutated_buffers output structure and semantics; reconcile's fall-back and errors."""
from __future__ import annotations

import copy

import pytest
import torch

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.demo.models import Decoder
from plan_models import C4, Stateful, decomposed_gm as _decomposed_gm, export
from trace_counts import count_decompositions

KV, CB = tte.WriteKind.KV_ALIAS, tte.WriteKind.COPY_BACK


def _lifted_decoder(layers=2):
    model = Decoder(layers=layers).eval()
    args = model.example_args()
    ep = torch.export.export(copy.deepcopy(model), args)
    plan = tte.plan_mutations(ep)
    return model, args, plan, tte.lift_mutated_buffers(ep.run_decompositions({}).module(), plan)


def test_lifted_graph_pairs_buffers_by_name_and_matches_eager():
    model, args, plan, lifted = _lifted_decoder()
    assert [f for f, _ in lifted.buffer_inputs] == list(plan.fqns)
    assert lifted.num_user_outputs == 1
    assert [i for _, i in lifted.buffer_outputs] == list(range(1, 1 + len(plan)))
    placeholders = [n.name for n in lifted.gm.graph.nodes if n.op == "placeholder"]
    assert placeholders == list(lifted.user_inputs) + [p for _, p in lifted.buffer_inputs]
    # no buffer is written in place any more, and no get_attr of a mutated buffer remains
    for n in lifted.gm.graph.nodes:
        assert n.target is not torch.ops.aten.copy_.default
        assert not (n.op == "get_attr" and n.target in plan)
    state = {f: lifted.initial_value(f).clone() for f in plan.fqns}
    eager = copy.deepcopy(model)
    for step in range(3):
        a = model.example_args(pos=step)
        want = eager(*a)
        outs = lifted.gm(*a, *[state[f] for f in plan.fqns])
        torch.testing.assert_close(outs[0], want)
        for fqn in plan.fqns:
            state[fqn] = outs[lifted.output_of(fqn)]
            torch.testing.assert_close(state[fqn], eager.get_buffer(fqn), msg=fqn)


def test_lift_accepts_exported_program_and_marks_copy_back_writes():
    m = Stateful(lambda m, x, p: _two(m, x, p), cache=(2, 8, 4), kv=C4)
    ep = export(m, torch.ones(2, 1, 4), torch.tensor([1]))
    plan = tte.plan_mutations(ep)
    assert plan.kinds() == {"cache": CB, "kv": KV}
    lifted = tte.lift_mutated_buffers(ep, plan)
    marked = {n.name for n in lifted.gm.graph.nodes if n.meta.get("_trt_no_kv_alias")}
    values = {n.name for n in lifted.gm.graph.output_node().args[0] if hasattr(n, "name")}
    assert len(marked) == 1 and marked <= values
    assert lifted.placeholder_of("cache") == "b_cache"


def _two(m, x, p):
    m.cache.index_copy_(1, p, x)
    m.kv.index_copy_(2, p, x[:1].unsqueeze(1).expand(1, 2, 1, 4).contiguous())
    return m.cache.sum() + m.kv.sum()


def test_lift_nested_names_resolve_by_fqn():
    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("state", torch.zeros(4, 8))

        def forward(self, idx, val):
            self.state.index_put_([idx], val)
            return self.state.sum(-1)

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = Inner()

        def forward(self, idx, val):
            return self.layer(idx, val)
    ep = torch.export.export(Outer(), (torch.tensor([0]), torch.ones(1, 8)))
    plan = tte.plan_mutations(ep)
    lifted = tte.lift_mutated_buffers(ep, plan)
    assert lifted.buffer_inputs == (("layer.state", "b_layer_state"),)
    out = lifted.gm(torch.tensor([2]), torch.ones(1, 8), torch.zeros(4, 8))
    assert out[lifted.output_of("layer.state")][2].sum() == 8


def test_lift_refuses_a_plan_of_another_program():
    ep_a = export(Stateful(lambda m, x: (m.a.add_(x), x)[1], a=(4,)), torch.ones(4))
    ep_b = export(Stateful(lambda m, x: (m.b.add_(x), x)[1], b=(4,)), torch.ones(4))
    with pytest.raises(tte.PlanError,
                       match=r"plan names buffers \['a'\] that this graph does not write"):
        tte.lift_mutated_buffers(ep_b, tte.plan_mutations(ep_a))
    with pytest.raises(tte.PlanError,
                       match=r"buffers \['b'\] are written by the graph but missing"):
        tte.lift_mutated_buffers(ep_b, tte.MutationPlan())


def _engine(**kw):
    base = dict(name="engine_0", input_names=("x", "b_k", "b_ring"),
                output_names=("y", "k_out", "ring_out"),
                input_buffers=(("b_k", "k"), ("b_ring", "ring")),
                output_buffers=(("k_out", "k"), ("ring_out", "ring")))
    base.update(kw)
    return tte.EngineInfo(**base)


def _plan(k=KV, ring=CB):
    return tte.MutationPlan((tte.BufferWrite("k", k, "aten.index_copy.default", "r"),
                             tte.BufferWrite("ring", ring, "aten.cat.default", "r")))


def test_reconcile_confirms_kv_and_fills_bindings():
    out = tte.reconcile(_plan(), [_engine(aliased_io=(tte.AliasedIO("k_out", "b_k"),))])
    assert out["k"].kind is KV
    assert (out["k"].engine, out["k"].input_binding, out["k"].output_binding) == \
        ("engine_0", "b_k", "k_out")
    assert (out["ring"].engine, out["ring"].output_binding) == ("engine_0", "ring_out")
    assert out.rebuilds == ()


def test_reconcile_falls_back_to_copy_back_when_not_aliased():
    out = tte.reconcile(_plan(), [_engine()])
    assert out["k"].kind is CB
    assert out["k"].reason == ("predicted KV (r) but engine 'engine_0' did not alias it; "
                               "copied back instead")
    assert out["k"].output_binding == "k_out"
    assert out.rebuilds == ()  # the engine already outputs the new value


def test_reconcile_requests_rebuild_when_no_output_carries_the_value():
    eng = _engine(output_names=("y", "ring_out"), output_buffers=(("ring_out", "ring"),))
    out = tte.reconcile(_plan(), [eng])
    assert out["k"].kind is CB
    assert [(r.engine, r.exclude_from_aliasing) for r in out.rebuilds] == [("engine_0", ("k",))]


def test_reconcile_write_outside_engines_falls_back():
    eng = _engine(input_names=("x", "b_ring"), input_buffers=(("b_ring", "ring"),),
                  output_names=("y", "ring_out"), output_buffers=(("ring_out", "ring"),))
    out = tte.reconcile(_plan(), [eng])
    assert out["k"].kind is CB and "no engine takes the buffer" in out["k"].reason
    assert out.rebuilds == ()


def test_reconcile_names_no_input_binding_when_another_engine_reads_the_buffer():
    """Qwen3.5's shape: engine_0 reads the state, engine_2 computes its new value. The write's
    input binding is the producing engine's own (none here) — never a binding of engine_0, which
    would make engine_2 copy into an input it does not have."""
    reader = _engine(output_names=("y",), output_buffers=())
    writer = _engine(name="engine_2", input_names=("h",), input_buffers=(),
                     output_names=("k_out", "ring_out"),
                     output_buffers=(("k_out", "k"), ("ring_out", "ring")))
    out = tte.reconcile(_plan(k=CB), [reader, writer])
    for fqn, binding in (("k", "k_out"), ("ring", "ring_out")):
        assert (out[fqn].engine, out[fqn].input_binding, out[fqn].output_binding) == \
            ("engine_2", None, binding)


def test_reconcile_copy_back_aliased_is_an_error_naming_both():
    eng = _engine(aliased_io=(tte.AliasedIO("ring_out", "b_ring"),))
    with pytest.raises(tte.PlanError,
                       match=r"buffer 'ring' is planned COPY_BACK .* engine "
                             r"'engine_0' aliases output 'ring_out' to its input 'b_ring'"):
        tte.reconcile(_plan(), [eng])


def test_reconcile_alias_of_unwritten_buffer_is_an_error():
    eng = _engine(input_names=("x", "b_k", "b_ring", "b_z"),
                  input_buffers=(("b_k", "k"), ("b_ring", "ring"), ("b_z", "z")),
                  output_names=("y", "k_out", "ring_out", "z_out"),
                  aliased_io=(tte.AliasedIO("z_out", "b_z"),))
    with pytest.raises(tte.PlanError, match="buffer 'z'\\), but eager never writes that buffer"):
        tte.reconcile(_plan(), [eng])


def test_engine_info_validates_alias_map():
    with pytest.raises(ValueError, match="aliased_io names output binding 'nope'"):
        _engine(aliased_io=(tte.AliasedIO("nope", "b_k"),))
    with pytest.raises(ValueError, match="aliased_io names input binding 'nope'"):
        _engine(aliased_io=(tte.AliasedIO("k_out", "nope"),))


# --- one functionalization, one lift -----------------------------------------------------

def _kv_and_ring():
    def fn(m, x, p):
        m.k.index_copy_(2, p, x)
        m.ring.copy_(torch.cat([m.ring[:, :, 1:], x[:, 0, 0, :].unsqueeze(-1)], dim=2))
        return m.k.sum(2) + m.ring.sum()
    return Stateful(fn, k=C4, ring=(1, 4, 3)), (torch.ones(1, 2, 1, 4), torch.tensor([3]))


def test_lift_in_place_rewrites_the_given_module_and_copies_nothing(monkeypatch):
    model, args = _kv_and_ring()
    gm = _decomposed_gm(copy.deepcopy(model), *args)
    plan = tte.plan_mutations(gm)

    def no_copy(*a, **k):
        raise AssertionError("lifting in place copied the module")
    monkeypatch.setattr(torch.fx.GraphModule, "__deepcopy__", no_copy)
    lifted = tte.lift_mutated_buffers(gm, plan, in_place=True)
    assert lifted.gm is gm
    # the names a copy would get, though ExportedProgram.module() erased nodes called b_k/b_ring
    assert lifted.buffer_inputs == (("k", "b_k"), ("ring", "b_ring"))
    monkeypatch.undo()
    eager, state = copy.deepcopy(model), [lifted.initial_value(f).clone() for f in plan.fqns]
    for step in range(3):
        a = (torch.full((1, 2, 1, 4), float(step)), torch.tensor([step]))
        outs = gm(*a, *state)
        torch.testing.assert_close(outs[0], eager(*a))
        state = [outs[lifted.output_of(f)] for f in plan.fqns]
        for f, s in zip(plan.fqns, state, strict=False):
            torch.testing.assert_close(s, eager.get_buffer(f), msg=f)


def test_lift_copies_by_default_and_leaves_the_module_as_it_was():
    model, args = _kv_and_ring()
    gm = _decomposed_gm(copy.deepcopy(model), *args)
    before = [(n.op, n.name, str(n.target)) for n in gm.graph.nodes]
    lifted = tte.lift_mutated_buffers(gm, tte.plan_mutations(gm))
    assert lifted.gm is not gm
    assert [(n.op, n.name, str(n.target)) for n in gm.graph.nodes] == before
    torch.testing.assert_close(gm(*args), copy.deepcopy(model)(*args))   # still the model


def test_planning_and_lifting_an_exported_program_functionalizes_it_once(monkeypatch):
    calls = count_decompositions(monkeypatch)
    model, args = _kv_and_ring()
    ep = torch.export.export(copy.deepcopy(model), args)     # training IR: in-place writes
    plan = tte.plan_mutations(ep)
    lifted = tte.lift_mutated_buffers(ep, plan)
    assert tte.plan_mutations(ep) == plan
    assert len(calls) == 1
    assert plan.kinds() == {"k": KV, "ring": CB}
    torch.testing.assert_close(lifted.gm(*args, *[lifted.initial_value(f) for f in plan.fqns])[0],
                               copy.deepcopy(model)(*args))
    decomposed = torch.export.export(copy.deepcopy(model), args).run_decompositions({})
    calls.clear()
    tte.lift_mutated_buffers(decomposed, tte.plan_mutations(decomposed))
    assert calls == []                                        # functional already: no re-trace


def test_the_functional_program_is_forgotten_with_its_program():
    import gc
    import weakref
    from torch_tensorrt_ext.lowering import graph_writes
    model, args = _kv_and_ring()
    ep = torch.export.export(copy.deepcopy(model), args)
    tte.plan_mutations(ep)
    assert ep in graph_writes._FUNCTIONAL
    held, ref = len(graph_writes._FUNCTIONAL), weakref.ref(ep)
    del ep
    gc.collect()
    assert ref() is None                       # the functional form does not keep it alive
    assert len(graph_writes._FUNCTIONAL) <= held - 1


def test_a_rewritten_program_is_functionalized_again():
    from torch_tensorrt_ext.lowering import graph_writes
    model, args = _kv_and_ring()
    ep = torch.export.export(copy.deepcopy(model), args)
    first = graph_writes.functional_program(ep)
    assert graph_writes.functional_program(ep) is first
    graph = ep.graph_module.graph
    with graph.inserting_before(graph.output_node()):
        graph.call_function(torch.ops.aten.zeros.default, ([1],))   # the graph is not the same
    assert graph_writes.functional_program(ep) is not first


def test_lifted_module_generates_its_code_when_first_used(monkeypatch):
    model, args = _kv_and_ring()
    gm = _decomposed_gm(copy.deepcopy(model), *args)
    plan = tte.plan_mutations(gm)
    codegens = []
    real = torch.fx.Graph.python_code
    monkeypatch.setattr(torch.fx.Graph, "python_code",
                        lambda self, *a, **k: codegens.append(self) or real(self, *a, **k))
    lifted = tte.lift_mutated_buffers(gm, plan, in_place=True)
    assert codegens == []                                     # the lift generated no code
    assert "def forward(self, args_0, args_1, b_k, b_ring)" in gm.code
    assert "b_ring" in str(gm)
    with gm.graph.inserting_before(gm.graph.output_node()):   # a later pass rewrites and
        gm.graph.call_function(torch.ops.aten.zeros.default, ([1],))   # recompiles as usual
    gm.recompile()
    assert "torch.ops.aten.zeros.default" in gm.code
    out = gm(*args, *[lifted.initial_value(f) for f in lifted.plan.fqns])
    torch.testing.assert_close(out[0], copy.deepcopy(model)(*args))


def test_graph_record_rebuilds_the_graph_as_it_was():
    from torch_tensorrt_ext.lowering.graph_record import GraphRecord
    model, args = _kv_and_ring()
    gm = _decomposed_gm(copy.deepcopy(model), *args)
    lifted = tte.lift_mutated_buffers(gm, tte.plan_mutations(gm), in_place=True)
    code = gm.code
    record = GraphRecord.of(gm.graph)
    for node in reversed(list(gm.graph.nodes)):              # a pass rewrites it in place
        if node.op == "call_function" and node.target is torch.ops.aten.cat.default:
            node.replace_all_uses_with(node.args[0][0])
            gm.graph.erase_node(node)
            break
    gm.recompile()
    assert gm.code != code
    rebuilt = record.rebuild(gm)
    assert rebuilt.code == code
    state = [lifted.initial_value(f) for f in lifted.plan.fqns]
    torch.testing.assert_close(rebuilt(*args, *state)[0], copy.deepcopy(model)(*args))


def test_lift_refuses_a_module_that_writes_buffers_in_place():
    model, args = _kv_and_ring()
    gm = torch.export.export(copy.deepcopy(model), args).module()   # training IR: index_copy_
    plan = tte.plan_mutations(gm)                                    # planned (re-exported)
    for in_place in (False, True):
        with pytest.raises(tte.PlanError, match="needs the functional GraphModule"):
            tte.lift_mutated_buffers(gm, plan, in_place=in_place)
