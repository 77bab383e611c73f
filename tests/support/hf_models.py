"""transformers decoders with tiny random configs (nothing downloaded), as transformers documents
their ExecuTorch export: `_model(name)` with a static cache, `_tokens(step, n)` deterministic
token ids, `_eager(model)` the recipe module transformers exports, run in PyTorch."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers")
from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM  # noqa: E402

MAX_CACHE = 16


TINY = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_attention_heads=2,
            num_key_value_heads=1, head_dim=8, max_position_embeddings=64)


def _llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(num_hidden_layers=1, **TINY))


def _qwen3():
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(num_hidden_layers=1, **TINY))


def _mistral():
    return transformers.MistralForCausalLM(
        transformers.MistralConfig(num_hidden_layers=1, sliding_window=4, **TINY))


def _gemma3():
    cfg = transformers.Gemma3TextConfig(
        num_hidden_layers=2, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"], **TINY)
    return transformers.Gemma3ForCausalLM(cfg)


MODELS = {"llama": _llama, "qwen3": _qwen3, "mistral": _mistral, "gemma3": _gemma3}


def _model(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    model.generation_config.cache_implementation = "static"
    return model


def _tokens(step, n=1):
    return torch.tensor([[(7 * (step + i) + 3) % TINY["vocab_size"] for i in range(n)]])


def _eager(model):
    """The eager reference: the same recipe module transformers exports, run in PyTorch."""
    return TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=MAX_CACHE).model
