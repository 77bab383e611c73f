"""Model families of test_model_families.py (`model_families.RTX`: state-space,
mixture-of-experts and seq2seq families, ExecuTorch's llama with its custom caches) saved ahead
of time with TensorRT-RTX engines through the save's verifier of the emitted program (its own
file, so that it and the families' stepping share the run's two workers)."""
from __future__ import annotations

import logging

import pytest

from model_families import RTX, ModelProgram, expected_plan
from rtx_env import compile_rtx, recorded_aliasing, torch_tensorrt_or_skip

pytestmark = pytest.mark.emulated_device

pytest.importorskip("transformers")
pytest.importorskip("executorch.examples.models.llama.llama_transformer")


@pytest.mark.parametrize("kind", RTX)
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
    assert kv == {f for f in program.fqns() if expected_plan(kind, f) == "KV"}
    path = tmp_path / f"{kind}.pte"
    with caplog.at_level(logging.WARNING):
        torch_tensorrt.save(trt, str(path), output_format="executorch",
                            arg_inputs=list(program.args(0)))
    assert path.stat().st_size > 0
    host = {f for f in program.fqns() if expected_plan(kind, f) == "host"}
    warned = {f for f in host if f"buffer {f!r} stays in host memory" in caplog.text}
    assert warned == host


def _compile_rtx(program: ModelProgram):
    import torch
    ep = torch.export.export(program.build(), program.args(0), strict=program.strict)
    return compile_rtx(ep, program.args(0), torch_executed_ops=program.torch_executed_ops())
