"""Stateful model families nobody here wrote, tiny and randomly initialised (nothing is
downloaded), as `stateful_check` programs (the generator's protocol), so each goes through the
same product path and the same comparison with eager as every generated program:

* state-space mixers from transformers, state in its `StaticCache` registered as buffers by
  `hybrid_models.HybridCacheDecoder`: Mamba2 (`mamba2`), Bamba (Mamba2 mixer + attention,
  `bamba`), GraniteMoeHybrid (Mamba2 mixer + attention, plain-op MLP, `granite_hybrid`);
* a mixture of experts: transformers' Qwen3.5-MoE (`qwen35_moe`: Gated DeltaNet +
  attention, routed experts through transformers' `batched_mm` experts, a shared expert with its
  `Linear(hidden, 1)` gate — stored transposed, a `[64, 1]` weight at stride 64, which the
  named-data weights once refused at compile: issue 55), state as for the SSM mixers;
* seq2seq decoders through transformers' own `Seq2SeqLMDecoderExportableModuleWithStaticCache`:
  T5 (`t5`; `t5_host_cat` with its `cat`s run by PyTorch), BART (`bart`), Whisper's decoder with
  its own head `proj_out` (`whisper`);
* ExecuTorch's llama with the source transforms its export applies: custom SDPA with its
  `llama::update_cache` KV cache (`llama_custom_sdpa`), the int8 quantized KV cache
  (`llama_quantized_kv`, scales and zero points as buffers), both (`llama_quantized_sdpa`), and
  the ring KV cache of its sliding-window attention wrapping past its window
  (`llama_ring`) — exported strict, as ExecuTorch's builder exports.

The buffers compared are every buffer eager PyTorch changes within `STEPS` calls — read from the
eager model, not from this package or torch.export (whose signature lists no mutation at all for
transformers' seq2seq wrapper, whose caches it reaches through a Python object).
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import torch

SSM = ("mamba2", "bamba", "granite_hybrid")
MOE = ("qwen35_moe",)
SEQ2SEQ = ("t5", "bart", "whisper", "t5_host_cat")
LLAMA = ("llama_custom_sdpa", "llama_quantized_kv", "llama_quantized_sdpa", "llama_ring")
FAMILIES = SSM + MOE + SEQ2SEQ + LLAMA
STEPS = 8

_HF_TINY = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                num_key_value_heads=1, num_hidden_layers=2, max_position_embeddings=64)
_MAMBA2 = dict(mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_n_groups=1,
               mamba_expand=2, mamba_chunk_size=8, mamba_d_conv=4)


def _ssm(kind: str) -> torch.nn.Module:
    import transformers
    from hybrid_models import HybridCacheDecoder
    if kind == "mamba2":
        cfg = transformers.Mamba2Config(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                        state_size=8, expand=2, head_dim=16, num_heads=4,
                                        n_groups=1, conv_kernel=4, chunk_size=8)
        model = transformers.Mamba2ForCausalLM(cfg)
    elif kind == "bamba":
        model = transformers.BambaForCausalLM(
            transformers.BambaConfig(attn_layer_indices=[1], **_MAMBA2, **_HF_TINY))
    else:
        model = transformers.GraniteMoeHybridForCausalLM(transformers.GraniteMoeHybridConfig(
            layer_types=["mamba", "attention"], num_local_experts=0, **_MAMBA2, **_HF_TINY))
    return HybridCacheDecoder(model.eval()).eval()


def _moe(kind: str) -> torch.nn.Module:
    import transformers
    from hybrid_models import HybridCacheDecoder
    cfg = transformers.Qwen3_5MoeTextConfig(
        layer_types=["linear_attention", "full_attention"], head_dim=16, linear_num_key_heads=2,
        linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
        shared_expert_intermediate_size=16, **{**_HF_TINY, "hidden_size": 64})
    # transformers' default `grouped_mm` experts index a tensor torch-tensorrt's lowering places
    # on cuda:0 on this GPU-less machine (upstream, not state); `batched_mm` is its export form
    cfg._experts_implementation = "batched_mm"
    return HybridCacheDecoder(transformers.Qwen3_5MoeForCausalLM(cfg).eval()).eval()


def _seq2seq(kind: str) -> torch.nn.Module:
    import transformers
    from transformers.integrations.executorch import (
        Seq2SeqLMDecoderExportableModuleWithStaticCache)
    layers = dict(vocab_size=128, d_model=32, decoder_layers=2, decoder_attention_heads=4,
                  decoder_ffn_dim=64, encoder_layers=1, encoder_attention_heads=4,
                  encoder_ffn_dim=64)
    if kind.startswith("t5"):
        model = transformers.T5ForConditionalGeneration(transformers.T5Config(
            vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
            num_heads=4))
    elif kind == "bart":
        model = transformers.BartForConditionalGeneration(
            transformers.BartConfig(max_position_embeddings=64, **layers))
    else:
        model = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(
            max_target_positions=64, num_mel_bins=8, max_source_positions=16, pad_token_id=0,
            bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, **layers))
        model.lm_head = model.proj_out   # the wrapper takes the head as `lm_head`
    return Seq2SeqLMDecoderExportableModuleWithStaticCache(
        model.eval(), max_static_cache_length=16, batch_size=1).eval()


def _llama(kind: str) -> torch.nn.Module:
    from executorch.examples.models.llama import llama_transformer, model_args
    from executorch.examples.models.llama.source_transformation import custom_kv_cache, sdpa
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401 (llama:: ops)
    args = model_args.ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=128,
                                max_seq_len=16, max_context_len=16, use_kv_cache=True,
                                enable_dynamic_shape=False, hidden_dim=128)
    m = llama_transformer.construct_transformer(args).eval()
    # in the order ExecuTorch's export_llama applies its source transforms
    if kind in ("llama_quantized_kv", "llama_quantized_sdpa"):
        m = custom_kv_cache.replace_kv_cache_with_quantized_kv_cache(m)
    if kind in ("llama_custom_sdpa", "llama_quantized_sdpa", "llama_ring"):
        m = custom_kv_cache.replace_kv_cache_with_custom_kv_cache(m)
        m = sdpa.replace_sdpa_with_quantized_sdpa(m) if kind == "llama_quantized_sdpa" \
            else sdpa.replace_sdpa_with_custom_op(m)
    if kind == "llama_ring":   # a window of 4 per layer: ring of 8 positions, wrapped by step 8
        m = custom_kv_cache.replace_kv_cache_with_ring_kv_cache(m, [4, 4])
    from hybrid_models import Decoder   # ExecuTorch's Transformer, called as its runner does
    return Decoder(m).eval()


def _token_args(step: int) -> tuple[torch.Tensor, ...]:
    return torch.tensor([[(7 * step + 3) % 128]]), torch.tensor([step])


@functools.cache
def _encoder_states() -> torch.Tensor:
    return torch.randn(1, 6, 32, generator=torch.Generator().manual_seed(5))


def _seq2seq_args(step: int) -> tuple[torch.Tensor, ...]:
    return torch.tensor([[(5 * step + 1) % 128]]), _encoder_states(), torch.tensor([step])


_BUILD: dict[str, Callable[[str], torch.nn.Module]] = {
    **{k: _ssm for k in SSM}, **{k: _moe for k in MOE}, **{k: _seq2seq for k in SEQ2SEQ},
    **{k: _llama for k in LLAMA}}


class ModelProgram:
    """A model family as a `stateful_check` program: built afresh (seed 0) on every `build`.
    `t5_host_cat` is T5 with its cross-attention cache `cat`s left to PyTorch
    (`torch_executed_ops`): compile and save on this GPU-less machine with pieces PyTorch runs."""

    bufs = ()                        # no bf16 state: floats compare to fp32's tolerance

    def __init__(self, kind: str):
        self.kind = kind
        self.host_ops = {"aten.cat.default"} if kind == "t5_host_cat" else set()
        self.strict = kind in LLAMA
        self.args = _seq2seq_args if kind in SEQ2SEQ else _token_args

    def build(self) -> torch.nn.Module:
        torch.manual_seed(0)
        return _BUILD[self.kind](self.kind)

    @functools.cached_property
    def _written(self) -> tuple[str, ...]:
        model = self.build()
        before = {n: b.clone() for n, b in model.named_buffers()}
        changed = set()
        for step in range(STEPS):
            with torch.no_grad():
                model(*self.args(step))
            changed |= {n for n, b in model.named_buffers() if not torch.equal(b, before[n])}
        return tuple(sorted(changed))

    def torch_executed_ops(self) -> set:
        return set(self.host_ops)

    def fqns(self) -> tuple[str, ...]:
        return self._written

    def kind_of(self, fqn: str) -> str:
        return f"{self.kind} state"

    def source(self) -> str:
        return f"model_families.ModelProgram({self.kind!r})"

    def __repr__(self) -> str:
        return self.source()



def custom_ops_llama(dynamic: bool = True, n_layers: int = 2) -> torch.nn.Module:
    """ExecuTorch's llama as its export builds it with `enable_dynamic_shape` and its custom ops
    (`use_sdpa_with_kv_cache`): the caches written by `llama::update_cache`, T positions from
    `input_pos[0].item()` in place, read by `llama::custom_sdpa`; called `(tokens, input_pos)`."""
    import pytest
    pytest.importorskip("executorch.extension.llm.custom_ops.custom_ops")
    from executorch.examples.models.llama import llama_transformer, model_args
    from executorch.examples.models.llama.source_transformation import custom_kv_cache, sdpa
    from hybrid_models import Decoder
    args = model_args.ModelArgs(dim=64, n_layers=n_layers, n_heads=4, n_kv_heads=2,
                                vocab_size=128, max_seq_len=16, max_context_len=16,
                                use_kv_cache=True, enable_dynamic_shape=dynamic, hidden_dim=128)
    torch.manual_seed(0)
    m = llama_transformer.construct_transformer(args).eval()
    m = sdpa.replace_sdpa_with_custom_op(custom_kv_cache.replace_kv_cache_with_custom_kv_cache(m))
    return Decoder(m).eval()


def llama_methods(path: str = "reference"):
    """`custom_ops_llama()` (one layer) as two methods of one module, exported strict as
    ExecuTorch's builder exports: `prefill` (a dynamic token count T, up to 8) and `decode` (one
    token), sharing the caches `llama::update_cache` writes. Returns `(ModelMethods, eager)`:
    `eager` a copy of the model in its initial state, called `(tokens, input_pos)`."""
    import copy

    from method_check import ModelMethods
    model = custom_ops_llama(n_layers=1)
    eager = copy.deepcopy(model)
    t = torch.export.Dim("T", max=8)
    args = {"prefill": (torch.tensor([[(7 * i + 3) % 128 for i in range(4)]]), torch.tensor([0])),
            "decode": (torch.tensor([[3]]), torch.tensor([0]))}
    dims = {"prefill": ({1: t}, {0: 1})}
    eps = {n: None if path == "recipe" else torch.export.export(
        model, a, dynamic_shapes=dims.get(n), strict=True) for n, a in args.items()}
    return ModelMethods(eps, args, {}, dims, {n: model for n in args}, path), eager
