"""Hybrid-state decoders nobody here wrote, built tiny with random weights: one state layer
followed by one full-attention layer with a static KV cache, called as `forward(tokens, pos)`
(one token per call, `pos` its position) the way ExecuTorch's llama runner calls them.

ExecuTorch's own (`executorch.examples.models.llama`, ExecuTorch's static KV cache):

* `lfm2`: LFM2's `ShortConv` (`conv_state`, written with `cat` + slice + `copy_` under
  `torch.no_grad()`);
* `qwen35`: Qwen3.5's `AttentionGatedDeltaNet` (`conv_state` and `recurrent_state`, each written
  twice per call: a `mul_` reset of a slice, then a `copy_` into the slice under `no_grad`; the
  recurrence itself is ExecuTorch's `llama::gated_delta_rule` custom op, left to PyTorch).

transformers' (its `StaticCache`, whose hybrid layers keep conv/recurrent states on a Python
object, registered as buffers by the model author's wrapper — `HybridCacheDecoder`):

* `hf_lfm2`: `Lfm2ForCausalLM` (`conv` + `full_attention` layers);
* `hf_qwen3_next`: `Qwen3NextForCausalLM` (Gated DeltaNet `linear_attention` + `full_attention`,
  dense MLP: `num_experts=0`).

Nothing here is written by this project but the wrappers: the layers are ExecuTorch's and
transformers', as model authors use them.
"""
from __future__ import annotations

import copy

import pytest
import torch

llama_transformer = pytest.importorskip("executorch.examples.models.llama.llama_transformer")
model_args = pytest.importorskip("executorch.examples.models.llama.model_args")
transformers = pytest.importorskip("transformers")

STEPS = 8
EXECUTORCH_KINDS = ("lfm2", "qwen35")
TRANSFORMERS_KINDS = ("hf_lfm2", "hf_qwen3_next")
KINDS = EXECUTORCH_KINDS + TRANSFORMERS_KINDS
_COMMON = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=128, max_seq_len=16,
               max_context_len=16, use_kv_cache=True, enable_dynamic_shape=False,
               hidden_dim=128)
_LAYERS = {
    "lfm2": dict(layer_types=["conv", "full_attention"]),
    "qwen35": dict(layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=4,
                   linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
                   linear_num_value_heads=4),
}
# the state each model writes per call: {fqn: "KV" or "COPY_BACK"}
STATE = {
    "lfm2": {"m.layers.0.conv.conv_state": "COPY_BACK",
             "m.layers.1.attention.kv_cache.k_cache": "KV",
             "m.layers.1.attention.kv_cache.v_cache": "KV"},
    "qwen35": {"m.layers.0.attention.conv_state": "COPY_BACK",
               "m.layers.0.attention.recurrent_state": "COPY_BACK",
               "m.layers.1.attention.kv_cache.k_cache": "KV",
               "m.layers.1.attention.kv_cache.v_cache": "KV"},
    "hf_lfm2": {"conv_state_0": "COPY_BACK", "key_cache_1": "KV", "value_cache_1": "KV",
                "cumulative_length_1": "COPY_BACK"},
    "hf_qwen3_next": {"conv_state_0": "COPY_BACK", "recurrent_state_0": "COPY_BACK",
                      "key_cache_1": "KV", "value_cache_1": "KV",
                      "cumulative_length_1": "COPY_BACK"},
}
if "cumulative_length_linear" in \
        transformers.cache_utils.LinearAttentionCacheLayerMixin.__init__.__code__.co_names:
    # transformers >= 5.25: the linear-attention layer's own token count, written every call
    for _kind in TRANSFORMERS_KINDS:
        STATE[_kind]["cumulative_length_linear_0"] = "COPY_BACK"


class Decoder(torch.nn.Module):
    """ExecuTorch's `Transformer`, called as its runner calls it."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.m = inner

    def forward(self, tokens, input_pos):
        return self.m(tokens, {"input_pos": input_pos})


class HybridCacheDecoder(torch.nn.Module):
    """A transformers causal LM with its `StaticCache`, written as transformers' own
    `TorchExportableModuleWithStaticCache` is (cache state registered as non-persistent buffers,
    `cumulative_length` set from the position, `attention_mask=None`), extended to the hybrid
    layers' conv/recurrent states, which transformers initialises lazily on the first call: one
    throwaway call allocates them, `reset()` zeroes everything, and the layers are put in decode
    mode (a zero state is what a prompt-less prefill leaves)."""

    def __init__(self, model, max_cache_len: int = 16):
        super().__init__()
        self.model = model
        self.cache = transformers.StaticCache(config=model.config, max_cache_len=max_cache_len)
        with torch.no_grad():
            model(input_ids=torch.tensor([[0]]), cache=self.cache,
                  cache_position=torch.tensor([0]), use_cache=True)
        self.cache.reset()
        for i, layer in enumerate(self.cache.layers):
            named = {"key_cache": getattr(layer, "keys", None),
                     "value_cache": getattr(layer, "values", None),
                     "cumulative_length": getattr(layer, "cumulative_length", None),
                     # transformers >= 5.25: a linear-attention layer counts its own tokens
                     "cumulative_length_linear": getattr(layer, "cumulative_length_linear", None),
                     "conv_state": getattr(layer, "conv_states", {}).get(0),
                     "recurrent_state": getattr(layer, "recurrent_states", {}).get(0)}
            for name, t in named.items():
                if isinstance(t, torch.Tensor):
                    self.register_buffer(f"{name}_{i}", t, persistent=False)
            for j in getattr(layer, "has_previous_state", {}):
                layer.has_previous_state[j] = True

    def forward(self, input_ids, cache_position):
        for layer in self.cache.layers:
            for name in ("cumulative_length", "cumulative_length_linear"):
                if isinstance(getattr(layer, name, None), torch.Tensor):
                    getattr(layer, name).copy_(cache_position[0])
        return self.model(input_ids=input_ids, attention_mask=None, cache=self.cache,
                          use_cache=True).logits


_HF_TINY = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                num_key_value_heads=1, num_hidden_layers=2, max_position_embeddings=64)


def _hf_model(kind: str):
    if kind == "hf_lfm2":
        cfg = transformers.Lfm2Config(layer_types=["conv", "full_attention"], **_HF_TINY)
        return transformers.Lfm2ForCausalLM(cfg)
    cfg = transformers.Qwen3NextConfig(
        head_dim=16, layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
        linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, num_experts=0, **_HF_TINY)
    return transformers.Qwen3NextForCausalLM(cfg)


def build(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind in TRANSFORMERS_KINDS:
        return HybridCacheDecoder(_hf_model(kind).eval()).eval()
    args = model_args.ModelArgs(**_COMMON, **_LAYERS[kind])
    return Decoder(llama_transformer.construct_transformer(args)).eval()


def step_args(step: int):
    return (torch.tensor([[(7 * step + 3) % 128]]), torch.tensor([step]))


def export(kind: str):
    """(eager model, its ExportedProgram) — exported non-strict, as ExecuTorch's llama export
    does; the eager copy is untouched by the export. (The program holds the model's state
    tensors themselves: running `ep.module()` steps the state the program would start from.)"""
    model = build(kind)
    return copy.deepcopy(model), torch.export.export(model, step_args(0), strict=False)
