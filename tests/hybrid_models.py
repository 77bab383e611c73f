"""ExecuTorch's own hybrid-state decoders (`executorch.examples.models.llama`), built tiny with
random weights: one state layer followed by one `full_attention` layer with ExecuTorch's static
KV cache, called as `forward(tokens, input_pos)` the way ExecuTorch's llama runner calls them.

* `lfm2`: LFM2's `ShortConv` (`conv_state`, written with `cat` + slice + `copy_` under
  `torch.no_grad()`);
* `qwen35`: Qwen3.5's `AttentionGatedDeltaNet` (`conv_state` and `recurrent_state`, each written
  twice per call: a `mul_` reset of a slice, then a `copy_` into the slice under `no_grad`; the
  recurrence itself is ExecuTorch's `llama::gated_delta_rule` custom op, left to PyTorch).

Nothing here is written by this project: the layers are ExecuTorch's, as model authors use them.
"""
from __future__ import annotations

import copy

import pytest
import torch

llama_transformer = pytest.importorskip("executorch.examples.models.llama.llama_transformer")
model_args = pytest.importorskip("executorch.examples.models.llama.model_args")

STEPS = 8
KINDS = ("lfm2", "qwen35")
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
}


class Decoder(torch.nn.Module):
    """ExecuTorch's `Transformer`, called as its runner calls it."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.m = inner

    def forward(self, tokens, input_pos):
        return self.m(tokens, {"input_pos": input_pos})


def build(kind: str) -> Decoder:
    torch.manual_seed(0)
    args = model_args.ModelArgs(**_COMMON, **_LAYERS[kind])
    return Decoder(llama_transformer.construct_transformer(args)).eval()


def step_args(step: int):
    return (torch.tensor([[(7 * step + 3) % 128]]), torch.tensor([step]))


def export(kind: str):
    """(eager model, its ExportedProgram) — exported non-strict, as ExecuTorch's llama export
    does; the eager copy is untouched by the export."""
    model = build(kind)
    return copy.deepcopy(model), torch.export.export(model, step_args(0), strict=False)
