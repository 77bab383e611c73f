"""transformers' documented ExecuTorch export (`TorchExportableModuleForDecoderOnlyLM.export()`,
strict) through real TensorRT-RTX conversion (the patched `torch_tensorrt.compile`, engines built
on this CPU machine): the converters record an aliased KV update for exactly the caches the plan
predicts, and the step counter is copied back."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("transformers")
from hf_models import MAX_CACHE, _model, _tokens  # noqa: E402
from rtx_env import compile_rtx, recorded_aliasing, torch_tensorrt_or_skip  # noqa: E402
from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM  # noqa: E402


def test_llama_decode_caches_convert_to_aliased_kv_update_layers():
    torch_tensorrt_or_skip()
    exportable = TorchExportableModuleForDecoderOnlyLM(_model("llama"), batch_size=1,
                                                       max_cache_len=MAX_CACHE)
    args = (_tokens(0), torch.tensor([0]))
    ep = exportable.export(input_ids=args[0], cache_position=args[1])
    trt = compile_rtx(ep, args)
    plan = trt.mutation_plan
    assert {w.fqn: w.kind.name for w in plan} == {
        "key_cache_0": "KV_ALIAS", "value_cache_0": "KV_ALIAS", "cumulative_length_0": "COPY_BACK"}
    recorded = recorded_aliasing(trt)
    assert sorted(recorded) == ["key_cache_0", "value_cache_0"]
    for fqn, (engine, output, inp) in recorded.items():
        assert (plan[fqn].engine, plan[fqn].output_binding, plan[fqn].input_binding) == \
            (engine, output, inp)


@pytest.mark.parametrize("verbose", [False, True])
def test_tensorrts_warnings_about_a_write_only_state_input_are_debug_lines(caplog, verbose):
    """`cumulative_length` is overwritten every call, never read: TensorRT warns twice about its
    unused engine input, once per layer. Those two lines are DEBUG (kept for a verbose run);
    nothing else TensorRT says is touched."""
    import logging

    from torch_tensorrt_ext.compiling.trt_log import TRT_LOGGER_NAME
    torch_tensorrt_or_skip()
    exportable = TorchExportableModuleForDecoderOnlyLM(_model("llama"), batch_size=1,
                                                       max_cache_len=MAX_CACHE)
    args = (_tokens(0), torch.tensor([0]))
    ep = exportable.export(input_ids=args[0], cache_position=args[1])
    logger = logging.getLogger(TRT_LOGGER_NAME)
    old = logger.level
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)
    caplog.handler.setLevel(logging.DEBUG)   # the logger's own level decides, as for a user
    try:
        compile_rtx(ep, args)
    finally:
        logger.setLevel(old)
    about = [r for r in caplog.records if r.name == TRT_LOGGER_NAME
             and "b_cumulative_length_0" in r.getMessage()]
    assert all(r.levelno == logging.DEBUG for r in about), [r.getMessage() for r in about]
    assert sorted(r.getMessage() for r in about) == (sorted([
        "Unused Input: b_cumulative_length_0",
        "[RemoveDeadLayers] Input Tensor b_cumulative_length_0 is unused or used only at "
        "compile-time, but is not being removed."]) if verbose else [])
