"""Every family that ever passed stays passing: stateful model families
users write, nobody here (model_families.py) — state-space and hybrid decoders (transformers'
Mamba, Mamba2, Bamba, GraniteMoeHybrid, Jamba, Zamba2, Nemotron-H, LFM2, Qwen3-Next; ExecuTorch's
LFM2 and Qwen3.5), mixtures of experts with hybrid state (Qwen3.5-MoE, LFM2-MoE), seq2seq
decoders (T5, BART, Whisper's, through transformers' own exportable wrapper), ExecuTorch's llama
with its default KV cache, custom SDPA + `llama::update_cache`, its quantized KV cache and its
ring KV cache — through the patched `torch_tensorrt` API on reference engines, held to eager for
8 steps by the generator's own checker (every output, and every buffer eager changes, from the
compiled module and from the `.pte`): `model_families.check_steps_like_eager`, the one check.
transformers' causal LMs with attention caches (static-cache decoders, MoE, LFM2, Qwen3-Next)
are test_model_families_decoders.py's, with the same check;
the TensorRT-RTX saves test_model_families_rtx.py's (a file per worker, so they share the run).

Per buffer, the plan and the bytes the delegates copy per call are pinned: the plan holds exactly
the buffers eager writes; a KV cache an engine aliases moves 0 B; a copy-back buffer an engine
writes moves exactly its size, once; a buffer only read moves 0 B; a cache a host op writes in
place (`llama::update_cache`, which has no TensorRT converter) moves 0 B through the delegates and
is written by the program itself, as `inspect` says (with state on the device, the program also
stages it across the link each call, as `inspect` counts).
"""
from __future__ import annotations

import pytest

from model_families import (DECODER, FAMILIES, HYBRID, LLAMA, MOE, SEQ2SEQ, SSM,
                            check_steps_like_eager)

pytestmark = pytest.mark.emulated_device

pytest.importorskip("transformers")
pytest.importorskip("executorch.examples.models.llama.llama_transformer")

# the others — transformers' causal LMs with attention caches: `DECODER`, the mixtures of experts
# with hybrid state, LFM2 and Qwen3-Next — are test_model_families_decoders.py's
HERE = SSM + SEQ2SEQ + LLAMA + ("lfm2", "qwen35")
assert set(HERE) | set(DECODER) | set(MOE) | set(HYBRID) == set(FAMILIES)


@pytest.mark.parametrize("kind", HERE)
def test_the_family_steps_like_eager_through_the_compiled_module_and_the_pte(kind):
    check_steps_like_eager(kind)
