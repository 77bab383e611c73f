"""Issue 55 item 7, the second half of the model families (test_model_families.py has the first,
and says what each family is held to; a file per worker, so the two share the run):
transformers' causal LMs through its documented static-cache export module
(`TorchExportableModuleForDecoderOnlyLM`'s, `hf_models.Stepped`) — dense (`DENSE`), with
sliding-window layers whose ring wraps within the 8 steps (`SLIDING`), and mixtures of experts
(`DECODER_MOE`) — each stepped against eager through the compiled module and the `.pte`, every
output and every buffer eager changes (the KV caches aliased, 0 B a call; the int64
`cumulative_length` counters copied back, 8 B each)."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

pytest.importorskip("transformers")

from model_families import DECODER, check_steps_like_eager  # noqa: E402


@pytest.mark.parametrize("kind", DECODER)
def test_the_family_steps_like_eager_through_the_compiled_module_and_the_pte(kind):
    check_steps_like_eager(kind)
