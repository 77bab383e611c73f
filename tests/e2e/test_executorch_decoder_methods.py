"""ExecuTorch's own decoders as two methods of one program (`prefill` of a dynamic length +
`decode`), each through a multi-method save path and called as ExecuTorch's llama runner calls
them (`model_families.llama_calls`: decodes after a prefill, a second prefill at a later
position, a reset and a new sequence) — every output and every cache by FQN equal to eager's
after every call: its dynamic llama with custom SDPA and `llama::update_cache` on every path, its
Gemma 4 text decoder (KV sharing across layers, per-layer embeddings) with each cache and SDPA
form on upstream's path. (Split from test_multi_method_models.py: `--dist loadfile` runs a file
on one worker.)"""
from __future__ import annotations

import pytest
import torch

from method_check import saved_and_loaded, saver_params, step_like_eager
from model_families import gemma4_methods, llama_calls, llama_methods

pytestmark = [pytest.mark.inspects_pte]

PATHS = saver_params()


@pytest.mark.parametrize("path_kind", PATHS)
def test_executorch_llama_custom_kv_cache_prefill_and_decode_interleaved_like_eager(
        tmp_path, path_kind):
    """ExecuTorch's llama with `enable_dynamic_shape` and the source transforms its export applies
    (custom SDPA, `llama::update_cache` KV cache): a 5-token prefill, decodes, a 3-token prefill
    at position 8, a decode; reset, a 2-token prefill, a decode."""
    methods, eager = llama_methods(path_kind)
    prog = saved_and_loaded(methods, tmp_path)
    step_like_eager(prog, eager, lambda name, a: eager(*a), llama_calls())


@pytest.mark.parametrize("cache,sdpa", [("index_copy", "custom"), ("narrow", "custom"),
                                        ("narrow", "torch")])
def test_executorch_gemma4_text_decoder_prefill_and_decode_interleaved_like_eager(
        tmp_path, cache, sdpa):
    """ExecuTorch's Gemma 4 text decoder (KV sharing across layers, per-layer embeddings;
    `model_families.gemma4_methods`) through torch_tensorrt's compile and ExecuTorch export,
    called as ExecuTorch's llama is (`llama_calls`, positions in full). Its default cache
    (written at an `.item()` start, attention over the prefix `[:start + T]`) was refused both
    ways: with its custom SDPA at compile (`start + T` and the prefix views were an engine's
    results: "engine result 5 is the integer s70 + u5"), with PyTorch's by the reference
    payload's export, which lost `start + T <= 16` when it unified its inputs' lengths
    ("Could not guard on data-dependent expression 8*Max(0, -u52 + Min(16, u52 + 4)) < 8")."""
    methods, eager = gemma4_methods("upstream", cache, sdpa)
    prog = saved_and_loaded(methods, tmp_path)
    calls = llama_calls(64, lambda start, n: torch.arange(start, start + n))
    step_like_eager(prog, eager, lambda name, a: eager(*a), calls, tol=1e-4)
