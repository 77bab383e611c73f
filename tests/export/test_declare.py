"""declare_mutations: paired by name, idempotent, verifier-clean, nothing else changed;
multi-method programs sharing a buffer; the delegate output order check; blob version refusal."""
from __future__ import annotations

import copy
import operator
import re
from types import SimpleNamespace

import pytest
import torch
from e2e_models import MODELS
from torch.export.graph_signature import OutputKind

import torch_tensorrt_ext as tte
from torch_tensorrt_ext import reference
from torch_tensorrt_ext.contracts.plan import Copier
from torch_tensorrt_ext.demo.models import Decoder
from torch_tensorrt_ext.executorch.saving.backend import delegate_output_bindings
from torch_tensorrt_ext.executorch.running.program import load
from torch_tensorrt_ext.export import declare_mutations

pytestmark = pytest.mark.inspects_pte


def _compiled_ep(model, args):
    compiled = reference.compile(torch.export.export(copy.deepcopy(model), args))
    return torch.export.export(compiled.gm, args), compiled


def _mutations(ep):
    return {s.target: s.arg.name for s in ep.graph_signature.output_specs
            if s.kind == OutputKind.BUFFER_MUTATION}


def test_declares_every_write_by_fqn_on_its_placeholder():
    model = Decoder(layers=2).eval()
    ep, compiled = _compiled_ep(model, model.example_args())
    assert _mutations(ep) == {}  # the engine call hides the writes, as with TensorRT
    out = declare_mutations(ep, compiled.plan, compiled.engines)
    placeholders = {fqn: name for name, fqn in out.graph_signature.inputs_to_buffers.items()}
    assert _mutations(out) == {w.fqn: placeholders[w.fqn] for w in compiled.plan}
    kinds = [s.kind for s in out.graph_signature.output_specs]
    assert kinds == [OutputKind.BUFFER_MUTATION] * len(compiled.plan) + [OutputKind.USER_OUTPUT]


def test_declaration_preserves_the_program_and_passes_the_verifier():
    model = Decoder(layers=1).eval()
    ep, compiled = _compiled_ep(model, model.example_args())
    out = declare_mutations(ep, compiled.plan, compiled.engines)
    out.verifier().check(out)
    assert out.example_inputs is ep.example_inputs
    assert out.verifiers == ep.verifiers
    assert out.constants is ep.constants and set(out.state_dict) == set(ep.state_dict)
    assert out.range_constraints == ep.range_constraints
    assert [e.fqn for e in out.module_call_graph] == [e.fqn for e in ep.module_call_graph]
    assert out.graph_signature.input_specs == ep.graph_signature.input_specs
    assert _mutations(ep) == {}  # the input program is not modified


def test_declaration_is_idempotent():
    model = Decoder(layers=1).eval()
    ep, compiled = _compiled_ep(model, model.example_args())
    once = declare_mutations(ep, compiled.plan, compiled.engines)
    twice = declare_mutations(once, compiled.plan, compiled.engines)
    assert twice is once
    assert once.graph_signature.output_specs == twice.graph_signature.output_specs


def test_declared_program_runs_in_pytorch_like_eager():
    factory, args_of, kinds = MODELS["two_submodules"]
    model = factory().eval()
    eager = copy.deepcopy(model)
    ep, compiled = _compiled_ep(model, args_of(0))
    mod = declare_mutations(ep, compiled.plan, compiled.engines).module()
    for step in range(4):
        with torch.no_grad():
            got = mod(*args_of(step))
            torch.testing.assert_close(got[0] if isinstance(got, tuple) else got,
                                       eager(*args_of(step)))
    for fqn in kinds:
        torch.testing.assert_close(mod.get_buffer(fqn), eager.get_buffer(fqn))


def test_engine_that_does_not_report_its_aliasing_is_refused():
    model = Decoder(layers=1).eval()
    ep, compiled = _compiled_ep(model, model.example_args())
    lying = [tte.EngineInfo(**{**e.__dict__, "aliased_io": ()}) for e in compiled.engines]
    with pytest.raises(tte.PlanError, match="engine '_run_on_acc_0': its signature aliases"):
        declare_mutations(ep, compiled.plan, lying)


def test_plan_naming_an_unknown_engine_is_refused():
    model = Decoder(layers=1).eval()
    ep, compiled = _compiled_ep(model, model.example_args())
    plan = compiled.plan.replace("step", engine="engine_9")
    with pytest.raises(tte.PlanError, match="written by engine 'engine_9', which this program "
                                            r"does not call \(engines: \['_run_on_acc_0'\]\)"):
        declare_mutations(ep, plan, compiled.engines)


class PrefillDecode(torch.nn.Module):
    """One KV cache written by two methods: prefill fills [0:4), decode writes one position."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.register_buffer("k", torch.zeros(1, 2, 8, 4))

    def forward(self, x, p):
        if self.mode == "prefill":
            self.k[:, :, 0:4, :] = x
        else:
            self.k.index_copy_(2, p, x)
        return self.k.sum(dim=(0, 1, 3))


def test_multi_method_program_shares_the_buffer(tmp_path):
    pre_args = (torch.randn(1, 2, 4, 4), torch.tensor([0]))
    dec_args = [(torch.randn(1, 2, 1, 4), torch.tensor([4 + i])) for i in range(4)]
    methods = {"prefill": (PrefillDecode("prefill"), pre_args),
               "decode": (PrefillDecode("decode"), dec_args[0])}
    plans = {n: reference.export_program(m, a)[1].plan for n, (m, a) in methods.items()}
    assert plans["prefill"]["k"].kind is tte.WriteKind.KV_ALIAS
    assert plans["decode"]["k"].kind is tte.WriteKind.KV_ALIAS
    path = reference.export(methods, tmp_path / "pd.pte", share_mutable_buffers=True)
    prog = load(path, method="decode")
    assert prog.method_names == {"prefill", "decode"}
    eager = PrefillDecode("prefill")
    torch.testing.assert_close(prog.run(*pre_args, method="prefill")[0], eager(*pre_args))
    eager.mode = "decode"
    for a in dec_args:
        torch.testing.assert_close(prog.run(*a)[0], eager(*a))
    assert prog.state_traffic() == {"k": 0}


def test_multi_method_declaration_is_per_method():
    eps, plans, engines = {}, {}, {}
    for name in ("prefill", "decode"):
        ep, c = _compiled_ep(PrefillDecode(name), (torch.randn(1, 2, 4 if name == "prefill" else 1,
                                                                4), torch.tensor([5])))
        eps[name], plans[name], engines[name] = ep, c.plan, c.engines
    out = declare_mutations(eps, plans, engines)
    assert set(out) == {"prefill", "decode"}
    assert all(_mutations(p) == {"k": "b_k"} for p in out.values())
    with pytest.raises(tte.PlanError, match=r"no plan for methods \['decode'\]"):
        declare_mutations(eps, {"prefill": plans["prefill"]})


def test_delegate_outputs_out_of_engine_order_are_refused():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    call = g.call_function(torch.ops.aten.relu.default, (x,))
    a = g.call_function(operator.getitem, (call, 1))
    b = g.call_function(operator.getitem, (call, 0))
    g.output((a, b))

    class EP:
        graph_module = SimpleNamespace(graph=g)
    with pytest.raises(tte.PlanError,
                       match="delegate outputs are not in engine binding order: "
                             "'y0' \\(binding 0\\) comes after 'y1' \\(binding 1\\)"):
        delegate_output_bindings(EP, call, ["y0", "y1"])
    g2 = torch.fx.Graph()
    x2 = g2.placeholder("x")
    call2 = g2.call_function(torch.ops.aten.relu.default, (x2,))
    g2.output((g2.call_function(operator.getitem, (call2, 0)),
               g2.call_function(operator.getitem, (call2, 2))))

    class EP2:
        graph_module = SimpleNamespace(graph=g2)
    assert delegate_output_bindings(EP2, call2, ["y0", "y1", "y2"]) == ["y0", "y2"]


@pytest.mark.writes_bad_pte
def test_pte_with_another_blob_version_is_refused_at_init(tmp_path, capfd):
    factory, args_of, _ = MODELS["counter"]
    path = reference.export(factory().eval(), args_of(0), tmp_path / "c.pte")
    data = bytearray(open(path, "rb").read())
    at = data.find(b"TR03")
    assert at > 0 and data.find(b"TR03", at + 1) == -1
    data[at:at + 4] = b"TR09"
    bad = tmp_path / "bad.pte"
    bad.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match="Failed to load method forward"):
        load(bad)
    assert ('init refused the delegate blob: unsupported blob magic "TR09"'
            in capfd.readouterr().err)


def _disagreeing(name, **changes):
    """(program, engines, plan with entry `fqn` changed, the compiled plan's entry)."""
    factory, args_of, kinds = MODELS[name]
    ep, compiled = _compiled_ep(factory().eval(), args_of(0))
    (fqn,) = kinds
    return ep, compiled.engines, compiled.plan.replace(fqn, **changes), compiled.plan[fqn]


def test_plan_saying_program_for_a_write_the_engine_copies_is_refused():
    ep, engines, plan, w = _disagreeing("ring_buffer", engine_copies=False)
    assert w.copier is Copier.ENGINE and plan["ring"].copier is Copier.PROGRAM
    with pytest.raises(tte.PlanError, match=re.escape(
            f"buffer 'ring': the plan says the program writes it back (COPY_BACK, copier "
            f"PROGRAM, input binding {w.input_binding!r}), but engine '_run_on_acc_0' records "
            f"that its output binding {w.output_binding!r} is copied into input "
            f"{w.input_binding!r} by the engine itself")):
        declare_mutations(ep, plan, engines)


def test_plan_saying_engine_for_a_write_the_program_copies_is_refused():
    from plan_models import StateReadOnTheHost
    args = (torch.randn(1, 8),)
    compiled = reference.compile(torch.export.export(StateReadOnTheHost(), args),
                                 torch_executed_ops=["aten.sin.default"])
    ep = torch.export.export(compiled.gm, args)
    w = compiled.plan["state"]
    plan = compiled.plan.replace("state", engine_copies=True)
    assert w.copier is Copier.PROGRAM and plan["state"].copier is Copier.ENGINE
    with pytest.raises(tte.PlanError, match=re.escape(
            f"buffer 'state': the plan says the engine copies it back itself (COPY_BACK, copier "
            f"ENGINE, input binding {w.input_binding!r}), but engine {w.engine!r} records "
            f"that its output binding {w.output_binding!r} is handed out (for the program to "
            "write back)")):
        declare_mutations(ep, plan, compiled.engines)


def test_plan_saying_program_for_an_aliased_kv_write_is_refused():
    ep, engines, plan, w = _disagreeing("kv_index_copy", kind=tte.WriteKind.COPY_BACK)
    assert plan["k"].copier is Copier.PROGRAM
    with pytest.raises(tte.PlanError, match=re.escape(
            f"buffer 'k': the plan says the program writes it back (COPY_BACK, copier PROGRAM, "
            f"input binding {w.input_binding!r}), but engine '_run_on_acc_0' records that its "
            f"output binding {w.output_binding!r} aliases input {w.input_binding!r} (written "
            "in place)")):
        declare_mutations(ep, plan, engines)


def test_plan_naming_a_binding_the_engine_lacks_is_refused():
    ep, engines, plan, _ = _disagreeing("ring_buffer", output_binding="output9")
    with pytest.raises(tte.PlanError, match="buffer 'ring': engine '_run_on_acc_0' has no output "
                                            r"binding 'output9' \(outputs: \["):
        declare_mutations(ep, plan, engines)
