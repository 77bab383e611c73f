"""Hybrid-state decoders nobody here wrote — ExecuTorch's own LFM2 short-conv and Qwen3.5 Gated
DeltaNet, transformers' LFM2 and Qwen3-Next with their `StaticCache` (see hybrid_models.py) —
through upstream's own API with this project's series: every state write the exported program
makes reaches the compiled module and the `.pte`, step after step.

Before the fix both lost a write silently: the state write sits in a `with torch.no_grad():`
block, which torch.export keeps as a `wrap_with_set_grad_enabled` higher-order op with no users,
and torch-tensorrt's pre-lowering dead-code elimination deleted it (LFM2: the conv state was
never updated; Qwen3.5: only the reset `mul_` survived, so the state was planned from the wrong
value). Every step is checked against eager — in the model families' one check
(`model_families.check_steps_like_eager`, where these four are the `HYBRID` group: ExecuTorch's
in test_model_families.py, transformers' in test_model_families_decoders.py): here, that the
state it holds them to is this state — and compile's own check is shown to refuse a module that
lost a write.
"""
from __future__ import annotations


import pytest
import torch
from hybrid_models import (
    EXECUTORCH_KINDS,
    KINDS,
    STATE,
    STEPS,
    TRANSFORMERS_KINDS,
    build,
    export,
    step_args,
)
from model_families import ModelProgram, expected_plan
from rtx_env import compile_rtx, recorded_aliasing, torch_tensorrt_or_skip

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.executorch.inspecting.verify_writes import WriteVerifyError
from torch_tensorrt_ext.contracts.plan import PlanError
from torch_tensorrt_ext.lowering import grad_blocks, graph_writes
from torch_tensorrt_ext.lowering.graph_writes import written_buffers

pytestmark = [pytest.mark.inspects_pte, pytest.mark.emulated_device]


def _compile_reference(ep):
    torch_tensorrt = torch_tensorrt_or_skip()
    with tte.reference.engines():
        return torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(step_args(0)))


@pytest.mark.parametrize("kind", KINDS)
def test_the_exported_program_writes_exactly_the_state_the_family_check_holds(kind):
    """Each model steps like eager, every write with it, through the compiled module and the
    `.pte` in the model families' one check (`model_families.check_steps_like_eager`:
    the plan is exactly the buffers eager writes, each planned as `expected_plan` says, copied
    as it says). Here, that those are this state: what the exported program writes, what eager
    writes, and how each is planned."""
    _, ep = export(kind)
    assert written_buffers(ep) == set(STATE[kind])
    assert set(ModelProgram(kind).fqns()) == set(STATE[kind])
    assert {f: expected_plan(kind, f) for f in STATE[kind]} == STATE[kind]


@pytest.mark.parametrize("kind", TRANSFORMERS_KINDS)
def test_the_transformers_wrapper_decodes_like_the_uncached_model(kind):
    """The reference the other tests hold the compiled module to: the wrapper's cached decode,
    one token per call, equals the model run without a cache on the whole sequence so far."""
    wrapper = build(kind)
    tokens = []
    for step in range(STEPS):
        ids, pos = step_args(step)
        tokens.append(ids)
        with torch.no_grad():
            got = wrapper(ids, pos)
            want = wrapper.model(input_ids=torch.cat(tokens, 1), use_cache=False).logits[:, -1:]
        torch.testing.assert_close(got, want, msg=lambda m: f"{kind} step {step}: {m}")


@pytest.mark.parametrize("kind", EXECUTORCH_KINDS)
def test_the_no_grad_writes_are_seen_as_hidden_from_dead_code_elimination(kind):
    """What the seam's protections act on: the state write sits inside a higher-order op that
    takes the buffer (here through a slice of it, for Qwen3.5) — a `no_grad` block, which the
    seam inlines first (`lowering/grad_blocks.py`): then no write is hidden any more."""
    _, ep = export(kind)
    assert graph_writes.hides_writes(ep)
    assert not graph_writes.hides_writes(grad_blocks.without_grad_blocks(ep))


def test_compile_refuses_a_module_that_lost_a_write(monkeypatch):
    """With the seam's protections off (LFM2's program handed to torch-tensorrt's lowering as it
    was: its `no_grad` block neither inlined nor functionalized), the pre-lowering pass deletes
    the block's write again — and compile fails naming the buffer and the node that wrote it,
    instead of returning a module with stale state. (Qwen3.5's lost write is its second of two
    into the same buffer: the set of written buffers does not change, which is why the seam
    removes such blocks before any pass runs.)"""
    monkeypatch.setattr(grad_blocks, "without_grad_blocks", lambda ep: ep)
    monkeypatch.setattr(graph_writes, "hides_writes", lambda ep: False)
    _, ep = export("lfm2")
    with pytest.raises(PlanError) as e:
        _compile_reference(ep)
    assert str(e.value).startswith(
        "buffer 'm.layers.0.conv.conv_state' is written by the exported program (node "
        "'slice_1'), but the compiled module does not carry the write: no "
        "entry in its plan (planned: ['m.layers.1.attention.kv_cache.k_cache', "
        "'m.layers.1.attention.kv_cache.v_cache']).")


@pytest.mark.parametrize("kind", KINDS)
def test_tensorrt_rtx_records_exactly_the_planned_aliasing(kind):
    """Real TensorRT-RTX conversion (engines built ahead of time here): the converters alias
    exactly the planned KV caches and every state write is in the plan."""
    torch_tensorrt_or_skip()
    _, ep = export(kind)
    trt = compile_rtx(ep, step_args(0))
    plan = trt.mutation_plan
    assert {w.fqn: "KV" if w.is_kv else "COPY_BACK" for w in plan} == STATE[kind]
    recorded = recorded_aliasing(trt)
    assert sorted(recorded) == sorted(f for f, k in STATE[kind].items() if k == "KV")
    for fqn, (engine, output, inp) in recorded.items():
        w = plan[fqn]
        assert (w.engine, w.output_binding, w.input_binding) == (engine, output, inp)


def test_save_refuses_a_pte_that_lost_a_write(monkeypatch, tmp_path):
    """Save's check reads the program ExecuTorch emits: with ExecuTorch's write-back pass made
    to drop its copies (a stand-in for any lowering that loses a write), saving Qwen3.5 fails
    naming the written-back buffer — its recurrent state — instead of writing a `.pte` that
    never updates it."""
    from executorch.exir.program import _program
    real = _program.insert_write_back_for_buffers_pass

    def dropping(ep):
        gm, sig = real(ep)
        for n in list(gm.graph.nodes):
            if n.target is torch.ops.aten.copy_.default:
                n.replace_all_uses_with(n.args[0])
                gm.graph.erase_node(n)
        gm.recompile()
        return gm, sig

    monkeypatch.setattr(_program, "insert_write_back_for_buffers_pass", dropping)
    torch_tensorrt = torch_tensorrt_or_skip()
    _, ep = export("qwen35")
    trt = _compile_reference(ep)
    with pytest.raises(WriteVerifyError) as e, tte.reference.engines():
        torch_tensorrt.save(trt, str(tmp_path / "lost.pte"), output_format="executorch",
                            arg_inputs=list(step_args(0)))
    assert str(e.value) == (
        "method 'forward': buffer 'm.layers.0.attention.recurrent_state' is mutated by the "
        "source, but no instruction of the saved program writes it (no write-back copy, no "
        "delegate writing or copying into its binding): the write would be lost. Compile the "
        "model again with the patched torch_tensorrt.compile, and report this with the program")
    assert not (tmp_path / "lost.pte").exists()
