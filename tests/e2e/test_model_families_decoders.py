"""The second half of the model families (test_model_families.py has the first,
and says what each family is held to; a file per worker, so the two share the run):
transformers' causal LMs through its documented static-cache export module
(`TorchExportableModuleForDecoderOnlyLM`'s, `hf_models.Stepped`) — dense (`DENSE`), with
sliding-window layers whose ring wraps within the 8 steps (`SLIDING`), and mixtures of experts
(`DECODER_MOE`) — and the ones with state besides attention caches: mixtures of experts with
hybrid state (Qwen3.5-MoE, LFM2-MoE) and transformers' LFM2 and Qwen3-Next through
`hybrid_models.HybridCacheDecoder` — each stepped against eager through the compiled module and
the `.pte`, every output and every buffer eager changes (the static caches' KV aliased, 0 B a
call; the int64 `cumulative_length` counters copied back, 8 B each; conv/recurrent states copied
back, their size)."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

pytest.importorskip("transformers")

from model_families import DECODER, MOE, check_steps_like_eager  # noqa: E402

# with state of their own besides attention caches, rerun with state on the emulated device
# (test_emulated_device), as before they moved here from test_model_families.py and
# test_hybrid_state.py; the static-cache decoders' state is the caches test_hf_transformers has
HYBRID_STATE = MOE + ("hf_lfm2", "hf_qwen3_next")


@pytest.mark.parametrize("kind", [
    *DECODER, *(pytest.param(k, marks=pytest.mark.emulated_device) for k in HYBRID_STATE)])
def test_the_family_steps_like_eager_through_the_compiled_module_and_the_pte(kind):
    check_steps_like_eager(kind)
