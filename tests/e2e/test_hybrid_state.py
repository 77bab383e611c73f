"""Hybrid-state decoders nobody here wrote — ExecuTorch's own LFM2 short-conv and Qwen3.5 Gated
DeltaNet, transformers' LFM2 and Qwen3-Next with their `StaticCache` (see hybrid_models.py) —
through upstream's own API with this project's series: every state write the exported program
makes reaches the compiled module and the `.pte`, step after step.

Before the fix both lost a write silently: the state write sits in a `with torch.no_grad():`
block, which torch.export keeps as a `wrap_with_set_grad_enabled` higher-order op with no users,
and torch-tensorrt's pre-lowering dead-code elimination deleted it (LFM2: the conv state was
never updated; Qwen3.5: only the reset `mul_` survived, so the state was planned from the wrong
value). Every step is checked against eager, and compile's own check is shown to refuse a module
that lost a write.
"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from helpers import buffer_nbytes
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
from rtx_env import compile_rtx, recorded_aliasing, torch_tensorrt_or_skip

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.executorch.inspecting.verify_writes import WriteVerifyError
from torch_tensorrt_ext.contracts.plan import PlanError
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
from torch_tensorrt_ext.lowering import grad_blocks, graph_writes
from torch_tensorrt_ext.lowering.graph_writes import written_buffers

pytestmark = [pytest.mark.inspects_pte, pytest.mark.emulated_device]


def _compile_reference(ep):
    torch_tensorrt = torch_tensorrt_or_skip()
    with tte.reference.engines():
        return torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(step_args(0)))


@pytest.fixture(scope="module", params=KINDS)
def compiled(request):
    kind = request.param
    eager, ep = export(kind)
    return kind, eager, ep, _compile_reference(ep)


def test_the_plan_holds_every_write_of_the_exported_program(compiled):
    kind, _, ep, trt = compiled
    plan = trt.mutation_plan
    assert written_buffers(ep) == set(STATE[kind])
    assert {w.fqn: "KV" if w.is_kv else "COPY_BACK" for w in plan} == STATE[kind]
    for w in plan:   # every write names the engine binding carrying its final value
        assert w.engine and w.output_binding, str(w)


def test_the_compiled_module_matches_eager_step_by_step(compiled):
    kind, eager, _, trt = compiled
    eager = copy.deepcopy(eager)
    for step in range(STEPS):
        with torch.no_grad():
            want = eager(*step_args(step))
            got = trt(*step_args(step))
        torch.testing.assert_close(got, want, msg=lambda m: f"{kind} step {step}: {m}")
        for fqn in STATE[kind]:
            torch.testing.assert_close(trt.get_buffer(fqn), eager.get_buffer(fqn),
                                       msg=lambda m: f"{kind} {fqn} step {step}: {m}")


def test_the_pte_matches_eager_step_by_step(compiled, tmp_path):
    kind = compiled[0]
    torch_tensorrt = torch_tensorrt_or_skip()
    eager, ep = export(kind)
    trt = _compile_reference(ep)   # the fixture's module may have stepped its buffers already
    path = str(tmp_path / f"{kind}.pte")
    with tte.reference.engines():
        torch_tensorrt.save(trt, path, output_format="executorch",
                            arg_inputs=list(step_args(0)))
    prog = tte.executorch.load(path)
    for step in range(STEPS):
        with torch.no_grad():
            want = eager(*step_args(step))
        torch.testing.assert_close(prog.run(*step_args(step))[0], want,
                                   msg=lambda m: f"{kind} .pte step {step}: {m}")
    # KV never moves; a copy-back write is one copy of the buffer — plus, where a device delegate
    # reads a buffer a host kernel also touches (Qwen3.5's recurrent state, read by
    # `llama::gated_delta_rule`, an ExecuTorch CPU kernel, when the state is device-placed), the
    # program's own staging across the link, which `inspect` counts from the file
    link = {b.fqn: b.program_link_bytes
            for b in inspect_pte(Path(path).read_bytes()).method("forward").buffers}
    traffic = prog.state_traffic()
    assert {f: n for f, n in traffic.items() if f in STATE[kind]} == {
        f: 0 if k == "KV" else buffer_nbytes(eager, f) + link[f] for f, k in STATE[kind].items()}
    # a buffer only read (a mask, rotary frequencies) is state on a device too: it never moves
    assert {f: n for f, n in traffic.items() if f not in STATE[kind]} == dict.fromkeys(
        set(traffic) - set(STATE[kind]), 0)


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
