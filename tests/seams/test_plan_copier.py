"""Who copies each write (`BufferWrite.copier`): what the compiled module's plan says equals what
the saved program does — Copier.ENGINE ⇔ declared on the buffer's own placeholder, no
write-back copy in the .pte; Copier.PROGRAM ⇔ declared on the value, ExecuTorch writes it back —
and the plan alone drives the declaration. The copier survives JSON, and `torch-tensorrt-ext
plan --engine reference` prints it."""
from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch
from e2e_models import MODELS
from helpers import buffer_nbytes
from plan_models import StateReadOnTheHost
from torch.export.graph_signature import OutputKind

import torch_tensorrt_ext as tte
from torch_tensorrt_ext import reference
from torch_tensorrt_ext.cli import main
from torch_tensorrt_ext.contracts.plan import Copier
from torch_tensorrt_ext.executorch.saving import lower
from torch_tensorrt_ext.executorch.running.program import load
from torch_tensorrt_ext.export import declare_mutations
from torch_tensorrt_ext.seams.save_declaration import aliased_plan

KV, CB = tte.WriteKind.KV_ALIAS, tte.WriteKind.COPY_BACK

# (model, torch_executed_ops): every e2e model, and a write left to PyTorch (outside any engine)
CASES = [(name, ()) for name in sorted(MODELS)] + [("kv_index_copy", ("aten.index_copy.default",))]


def _in_place(ep) -> dict:
    """FQN -> whether its BUFFER_MUTATION is declared on the buffer's own placeholder."""
    sig = ep.graph_signature
    placeholder = {fqn: name for name, fqn in sig.inputs_to_buffers.items()}
    return {s.target: s.arg.name == placeholder[s.target] for s in sig.output_specs
            if s.kind == OutputKind.BUFFER_MUTATION}


@pytest.mark.parametrize("name,excluded", CASES, ids=[f"{n}{'-excluded' if x else ''}"
                                                      for n, x in CASES])
def test_plan_copier_is_what_the_pte_does(tmp_path, name, excluded):
    factory, args_of, _ = MODELS[name]
    model = factory().eval()
    ep, compiled = reference.export_program(model, args_of(0), torch_executed_ops=excluded)
    plan = compiled.plan
    in_place = _in_place(ep)
    assert set(in_place) == set(plan.fqns)           # every buffer declared, once, by FQN
    prog = load(lower.save_pte(ep, str(tmp_path / f"{name}.pte")))
    write_back = prog.program_copy_bytes()
    for w in plan:
        engine = w.copier is Copier.ENGINE
        assert in_place[w.fqn] == engine, (w.fqn, w.copier, in_place)
        assert write_back[w.fqn] == (0 if engine else buffer_nbytes(model, w.fqn)), \
            (w.fqn, w.copier)
        if w.is_kv:
            assert engine                             # a KV write is its engine's, in place
        if engine and w.kind is CB:
            assert w.engine_copies and w.engine and w.input_binding and w.output_binding
    # the engines' records, read at save time, say the same as the compiled module's plan
    assert {w.fqn: w.copier for w in aliased_plan(
        torch.export.export(compiled.gm, args_of(0)))} == {
        w.fqn: w.copier for w in plan if w.copier is Copier.ENGINE}


def _host_read_plan():
    return reference.compile(StateReadOnTheHost(), (torch.randn(1, 8),),
                             torch_executed_ops=["aten.sin.default"]).plan


def test_both_copiers_occur():
    """The cases above are not vacuous: the engine copies a copy-back write it alone sees —
    also when the program returns the new value (it is then handed out and copied); a buffer a
    host op also reads, or a write outside any engine, is the program's."""
    def plan(name, **kw):
        factory, args_of, _ = MODELS[name]
        return reference.compile(factory().eval(), args_of(0), **kw).plan
    assert plan("ring_buffer")["ring"].copier is Copier.ENGINE
    assert plan("counter")["n"].copier is Copier.ENGINE
    assert plan("returns_its_state")["n"].copier is Copier.ENGINE
    assert _host_read_plan()["state"].copier is Copier.PROGRAM
    left = plan("kv_index_copy", torch_executed_ops=["aten.index_copy.default"])["k"]
    assert (left.kind, left.copier, left.engine) == (CB, Copier.PROGRAM, None)
    assert plan("kv_index_copy")["k"].copier is Copier.ENGINE


def test_declaring_from_the_plan_equals_declaring_from_the_engines():
    factory, args_of, _ = MODELS["two_submodules"]
    model = factory().eval()
    compiled = reference.compile(copy.deepcopy(model), args_of(0))
    ep = torch.export.export(compiled.gm, args_of(0))
    from_plan = declare_mutations(ep, compiled.plan, compiled.engines)
    from_engines = declare_mutations(ep, aliased_plan(ep))
    assert _in_place(from_plan) == _in_place(from_engines) == {"left.k": True,
                                                               "right.ring": True}


def test_declaration_follows_the_plans_copier():
    """In place for Copier.ENGINE (KV, or the engine's own copy), on the value for PROGRAM."""
    for name in ("kv_index_copy", "ring_buffer", "returns_its_state"):
        factory, args_of, _ = MODELS[name]
        compiled = reference.compile(factory().eval(), args_of(0))
        out = declare_mutations(torch.export.export(compiled.gm, args_of(0)), compiled.plan,
                                compiled.engines)
        in_place = _in_place(out)
        for w in compiled.plan:
            assert in_place[w.fqn] == (w.copier is Copier.ENGINE), (name, w.fqn, w.copier)


def _compiled_plan():
    factory, args_of, _ = MODELS["ema_and_counter"]
    plan = reference.compile(factory().eval(), args_of(0)).plan
    k = reference.compile(MODELS["kv_index_copy"][0]().eval(), MODELS["kv_index_copy"][1](0)).plan
    back = _host_read_plan()
    return tte.MutationPlan(plan.writes + (k["k"], dataclasses.replace(back["state"],
                                                                       fqn="m.state")))


def test_copier_round_trips_through_json():
    plan = _compiled_plan()
    assert [w.copier for w in plan] == [Copier.ENGINE, Copier.ENGINE, Copier.ENGINE,
                                        Copier.PROGRAM]
    d = json.loads(plan.to_json())
    assert [w["copier"] for w in d["writes"]] == ["engine", "engine", "engine", "program"]
    assert "engine_copies" not in d["writes"][0]
    again = tte.MutationPlan.from_dict(d)
    assert again == plan and again.copiers() == plan.copiers()
    text = str(plan)
    assert "COPY_BACK  ENGINE" in text and "KV_ALIAS   ENGINE" in text
    assert "COPY_BACK  PROGRAM" in text


def test_json_without_copier_takes_the_kinds_own_and_a_contradiction_is_refused():
    plan = _compiled_plan()
    d = json.loads(plan.to_json())
    for w in d["writes"]:
        del w["copier"]            # a plan serialised before copiers existed
    old = tte.MutationPlan.from_dict(d)
    assert old.copiers() == {"avg": Copier.PROGRAM, "n": Copier.PROGRAM, "k": Copier.ENGINE,
                             "m.state": Copier.PROGRAM}
    kv = {**json.loads(plan.to_json())["writes"][2], "copier": "program"}
    with pytest.raises(tte.PlanError, match="buffer 'k': a KV_ALIAS write is written in place "
                                            "by its engine, but the plan says copier 'program'"):
        tte.MutationPlan.from_dict({"writes": [kv]})


def test_engine_copier_needs_the_engine_and_its_bindings():
    with pytest.raises(tte.PlanError, match="buffer 'ring': its engine copies it back, but the "
                                            "plan names no engine and bindings for it"):
        tte.BufferWrite("ring", CB, "aten.cat.default", "r", engine_copies=True)


def test_a_kv_write_turned_copy_back_is_the_programs_copy():
    """How `reconcile` and a rebuild downgrade a write (dataclasses.replace of the kind): the
    copier follows, nobody resets it."""
    kv = tte.BufferWrite("k", KV, "aten.index_copy.default", "r", engine="e", input_binding="i",
                         output_binding="o")
    assert kv.copier is Copier.ENGINE
    assert dataclasses.replace(kv, kind=CB).copier is Copier.PROGRAM
    plan = tte.MutationPlan((kv,))
    assert plan.replace("k", kind=CB)["k"].copier is Copier.PROGRAM
    engine_kv = tte.BufferWrite("k", KV, "aten.index_copy.default", "r", engine="e",
                                input_binding="i", output_binding="o", engine_copies=True)
    assert engine_kv == kv                            # a KV write is the engine's anyway


def test_plan_cli_prints_the_compiled_copiers(capsys):
    assert main(["plan", "--example", "decoder", "--layers", "1", "--engine", "reference",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {w["fqn"]: (w["kind"], w["copier"]) for w in d["writes"]} == {
        "step": ("copy_back", "engine"), "layers.0.attn.k_cache": ("kv_alias", "engine"),
        "layers.0.attn.v_cache": ("kv_alias", "engine"),
        "layers.0.conv.state": ("copy_back", "engine")}
    assert all(w["engine"] == "_run_on_acc_0" for w in d["writes"])
    assert main(["plan", "--example", "decoder", "--layers", "1"]) == 0
    text = capsys.readouterr().out
    assert "layers.0.conv.state    COPY_BACK  PROGRAM" in text   # before any engine exists


@pytest.mark.parametrize("name", ["two_submodules", "gated_deltanet_states",
                                  "reads_old_cache_after_write"])
def test_tensorrt_engines_get_the_same_decision_as_reference_engines(name):
    """One decision for both engine kinds: a TensorRT(-RTX) engine's writes have the copiers a
    reference engine's have, and each write its delegate copies is in the engine's own record
    (`tte_copy_back`). In PyTorch torch-tensorrt's runtime cannot copy into a buffer, so the
    exported program (format exported_program) writes every copy-back value back itself."""
    from rtx_env import torch_tensorrt_or_skip
    from upstream_matrix import compiled

    from torch_tensorrt_ext.engines.engine_module import COPY_BACK_ATTR
    torch_tensorrt = torch_tensorrt_or_skip()
    _, args, _, trt = compiled(name)
    plan = trt.mutation_plan
    factory, args_of, _ = MODELS[name]
    ref = reference.compile(factory().eval(), args_of(0)).plan
    assert plan.copiers() == ref.copiers()
    recorded = {(n, o, i) for n, m in trt.named_children()
                for o, i in getattr(m, COPY_BACK_ATTR, ())}
    assert recorded == {(w.engine, w.output_binding, w.input_binding) for w in plan
                        if w.engine_copies}
    from torch_tensorrt.dynamo._exporter import _declare_aliased_kv_mutations_on_ep
    ep = _declare_aliased_kv_mutations_on_ep(torch_tensorrt.dynamo.export(trt,
                                                                          arg_inputs=list(args)))
    assert _in_place(ep) == {w.fqn: w.is_kv for w in plan}
