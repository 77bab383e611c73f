"""Issue 31: stateful model families users write — transformers' Mamba2, Bamba and
GraniteMoeHybrid (state-space mixers), T5, BART and Whisper's decoder (seq2seq, transformers' own
exportable wrapper), ExecuTorch's llama with custom SDPA + `llama::update_cache`, its quantized KV
cache and its ring KV cache (model_families.py) — through the patched `torch_tensorrt` API on
reference engines, held to eager for 8 steps by the generator's own checker (every output, and
every buffer eager changes, from the compiled module and from the `.pte`), and saved ahead of time
with TensorRT-RTX engines through the save's verifier of the emitted program.

Per buffer, the plan and the bytes the delegates copy per call are pinned: a KV cache an engine
aliases moves 0 B; a copy-back buffer an engine writes moves exactly its size, once; a cache a
host op writes in place (`llama::update_cache`, which has no TensorRT converter) moves 0 B through
the delegates and is written by the program itself, as `inspect` says (with state on the
device, the program also stages it across the link each call, as `inspect` counts).
"""
from __future__ import annotations

import logging

import pytest

from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte

from model_families import FAMILIES, LLAMA, STEPS, ModelProgram
from rtx_env import compile_rtx, recorded_aliasing, torch_tensorrt_or_skip
from stateful_check import check_program

pytestmark = pytest.mark.emulated_device

pytest.importorskip("transformers")
pytest.importorskip("executorch.examples.models.llama.llama_transformer")


def _is_kv_cache(fqn: str) -> bool:
    leaf = fqn.rsplit(".", 1)[-1]
    return leaf.startswith(("key_cache", "value_cache", "k_cache", "v_cache"))


def _expected_plan(kind: str, fqn: str) -> str:
    """What each family's state is, from the models' own code: SSM conv/recurrent states are
    whole-tensor rewrites (copy-back by an engine); transformers' static KV caches are aliased by
    the engine; ExecuTorch's custom KV caches are written in place by `llama::update_cache`
    (quantized too), a host op; positions/counters are small copy-back state."""
    if kind in LLAMA and "cache_positions" not in fqn:
        return "host"
    return "KV" if _is_kv_cache(fqn) else "COPY_BACK"


@pytest.mark.parametrize("kind", FAMILIES)
def test_the_family_steps_like_eager_through_the_compiled_module_and_the_pte(kind):
    torch_tensorrt_or_skip()
    program, seen = ModelProgram(kind), {}
    result = check_program(program, steps=STEPS, observe=seen.__setitem__)
    assert result.ok, result.report(program)
    assert program.fqns(), f"{kind}: eager changed no buffer"
    plan = {w.fqn: w for w in seen["plan"]}
    assert set(program.fqns()) <= set(plan), sorted(set(program.fqns()) - set(plan))
    # state on the device read or written by a host kernel is staged across the link by the
    # program itself: counted from the file, as `inspect` reports it (0 with state on the host)
    buffers = {b.fqn: b for b in inspect_pte(seen["pte"]).method("forward").buffers}
    link = {f: b.program_link_bytes for f, b in buffers.items()}
    model = program.build()
    for fqn in program.fqns():
        w, want = plan[fqn], _expected_plan(kind, fqn)
        got = "host" if w.engine is None else "KV" if w.is_kv else "COPY_BACK"
        assert got == want, f"{kind} {fqn}: planned {got} ({w.reason}), expected {want}"
        b = model.get_buffer(fqn)
        moved = (b.numel() * b.element_size() if want == "COPY_BACK" else 0) + link[fqn]
        assert seen["traffic"][fqn] == moved, (kind, fqn, seen["traffic"][fqn], moved)
        if want == "host":   # inspect names the host kernel writing it (state on the device:
            # the program also copies it across the link, so it is the program's copy-back)
            assert buffers[fqn].kind == ("copy_back" if link[fqn] else "in_place"), buffers[fqn]
            assert "host kernels write it in place: llama::update_cache" in \
                buffers[fqn].host_path, buffers[fqn]


@pytest.mark.parametrize("kind", FAMILIES)
def test_the_family_saves_with_tensorrt_rtx_engines_aliasing_every_kv_cache(kind, tmp_path,
                                                                           caplog):
    """Engines built ahead of time with TensorRT-RTX (on this CPU): the converters alias exactly
    the caches the plan calls KV, save's verifier of the emitted program accepts every state
    write (a write lost or doubled would refuse the save), and a cache a host op writes in place
    is named by the save's warning (it stays in host memory). ExecuTorch's ring KV cache hands its
    engines the start position read with item(): symbolic scalar inputs, bound as 0-d tensors
    (a shape tensor through host memory, runtime/src/tensorrt_engine.cpp)."""
    torch_tensorrt = torch_tensorrt_or_skip()
    program = ModelProgram(kind)
    trt = _compile_rtx(program)
    kv = {w.fqn for w in trt.mutation_plan if w.is_kv}
    assert set(recorded_aliasing(trt)) == kv
    assert kv == {f for f in program.fqns() if _expected_plan(kind, f) == "KV"}
    path = tmp_path / f"{kind}.pte"
    with caplog.at_level(logging.WARNING):
        torch_tensorrt.save(trt, str(path), output_format="executorch",
                            arg_inputs=list(program.args(0)))
    assert path.stat().st_size > 0
    host = {f for f in program.fqns() if _expected_plan(kind, f) == "host"}
    warned = {f for f in host if f"buffer {f!r} stays in host memory" in caplog.text}
    assert warned == host


def _compile_rtx(program: ModelProgram):
    import torch
    ep = torch.export.export(program.build(), program.args(0), strict=program.strict)
    return compile_rtx(ep, program.args(0), torch_executed_ops=program.torch_executed_ops())
