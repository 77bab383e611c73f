"""Stateful model families nobody here wrote, tiny and randomly initialised (nothing is
downloaded), as `stateful_check` programs (the generator's protocol), so each goes through the
same product path and the same comparison with eager as every generated program — every family
the project's tests and notes have run (each stays passing), by group:

* state-space mixers from transformers, state in its `StaticCache` registered as buffers by
  `hybrid_models.HybridCacheDecoder` (`SSM`): Mamba2 (`mamba2`), Mamba (`mamba`), Bamba (Mamba2
  mixer + attention, `bamba`), GraniteMoeHybrid (Mamba2 mixer + attention, plain-op MLP,
  `granite_hybrid`), Jamba (Mamba mixer + attention with routed experts, `jamba`), Zamba2 (Mamba2
  mixers, the second with its shared attention block, `zamba2`), Nemotron-H (`nemotron_h`);
* mixtures of experts with hybrid state (`MOE`): transformers' Qwen3.5-MoE (`qwen35_moe`: Gated
  DeltaNet + attention, routed experts through transformers' `batched_mm` experts, a shared
  expert with its `Linear(hidden, 1)` gate — stored transposed, a `[64, 1]` weight at stride 64,
  which the named-data weights once refused at compile), LFM2-MoE (`lfm2_moe`), state
  as for the SSM mixers;
* seq2seq decoders through transformers' own `Seq2SeqLMDecoderExportableModuleWithStaticCache`
  (`SEQ2SEQ`): T5 (`t5`; `t5_host_cat` with its `cat`s run by PyTorch), BART (`bart`), Whisper's
  decoder with its own head `proj_out` (`whisper`);
* ExecuTorch's llama with the source transforms its export applies (`LLAMA`): none, its default
  static KV cache (`llama_kv`), custom SDPA with its `llama::update_cache` KV cache
  (`llama_custom_sdpa`), the int8 quantized KV cache (`llama_quantized_kv`, scales and zero
  points as buffers), both (`llama_quantized_sdpa`), and the ring KV cache of its sliding-window
  attention wrapping past its window (`llama_ring`) — exported strict, as ExecuTorch's builder
  exports;
* hybrid-state decoders (`HYBRID`, `hybrid_models`): ExecuTorch's LFM2 and Qwen3.5, transformers'
  LFM2 and Qwen3-Next;
* transformers' causal LMs through its documented static-cache export module
  (`hf_models.Stepped`, `DECODER`): dense (`DENSE`), with sliding-window layers (`SLIDING`; the
  window of 4 wraps within the 8 steps) and mixtures of experts (`DECODER_MOE`; GPT-OSS with
  sliding layers and attention sinks too).

The buffers compared are every buffer eager PyTorch changes within `STEPS` calls — read from the
eager model, not from this package or torch.export (whose signature lists no mutation at all for
transformers' seq2seq wrapper, whose caches it reaches through a Python object).
`check_steps_like_eager(kind)` is the one check each family is held to (test_model_families.py
and test_model_families_decoders.py, a file per worker).
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import torch

SSM = ("mamba2", "bamba", "granite_hybrid", "mamba", "jamba", "zamba2", "nemotron_h")
MOE = ("qwen35_moe", "lfm2_moe")
SEQ2SEQ = ("t5", "bart", "whisper", "t5_host_cat")
LLAMA = ("llama_kv", "llama_custom_sdpa", "llama_quantized_kv", "llama_quantized_sdpa",
         "llama_ring")
# hybrid_models.KINDS: ExecuTorch's LFM2 and Qwen3.5, transformers' LFM2 and Qwen3-Next
HYBRID = ("lfm2", "qwen35", "hf_lfm2", "hf_qwen3_next")
# transformers' causal LMs through its documented static-cache export module (hf_models.Stepped):
# dense, sliding-window (some layers), mixture of experts
DENSE = ("llama", "qwen3", "qwen2", "phi3", "phi", "granite", "olmo2", "smollm3", "starcoder2",
         "stablelm", "cohere", "glm", "gpt_neox", "gemma", "gpt2")
SLIDING = ("mistral", "gemma3", "gemma2", "cohere2")
DECODER_MOE = ("mixtral", "qwen3_moe", "gpt_oss")
DECODER = DENSE + SLIDING + DECODER_MOE
FAMILIES = SSM + MOE + SEQ2SEQ + LLAMA + HYBRID + DECODER
STEPS = 8

_HF_TINY = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                num_key_value_heads=1, num_hidden_layers=2, max_position_embeddings=64)
_MAMBA2 = dict(mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_n_groups=1,
               mamba_expand=2, mamba_chunk_size=8, mamba_d_conv=4)


_SSM = {   # beyond _HF_TINY: each family's tiny state-space (and attention, MoE) layers
    "bamba": dict(attn_layer_indices=[1], **_MAMBA2),
    "granite_hybrid": dict(layer_types=["mamba", "attention"], num_local_experts=0, **_MAMBA2),
    "mamba": dict(state_size=8, expand=2, conv_kernel=4),
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
                  expert_layer_offset=1, num_experts=2, num_experts_per_tok=1, mamba_d_state=8,
                  mamba_d_conv=4, mamba_expand=2),
    "zamba2": dict(layers_block_type=["mamba", "hybrid"], num_mem_blocks=1, mamba_d_state=8,
                   mamba_d_conv=4, mamba_expand=2, mamba_ngroups=1, mamba_headdim=16,
                   n_mamba_heads=4, chunk_size=8, use_mem_rope=True, adapter_rank=8,
                   attention_head_dim=16),
    "nemotron_h": dict(layers_block_type=["mamba", "attention"], mamba_num_heads=4,
                       mamba_head_dim=16, ssm_state_size=8, n_groups=1, conv_kernel=4,
                       chunk_size=8, head_dim=16),
}


def _ssm(kind: str) -> torch.nn.Module:
    """transformers' state-space families (Mamba, Jamba, Zamba2, Nemotron-H: Mamba2 mixers but
    Mamba's, Jamba's; Jamba's MLP a mixture of experts every other layer; Zamba2's second layer
    a Mamba2 mixer with its shared attention block), state in its `StaticCache`."""
    import transformers
    from hybrid_models import HybridCacheDecoder
    if kind == "mamba2":
        cfg = transformers.Mamba2Config(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                        state_size=8, expand=2, head_dim=16, num_heads=4,
                                        n_groups=1, conv_kernel=4, chunk_size=8)
    else:
        model_type = "granitemoehybrid" if kind == "granite_hybrid" else kind
        cfg = transformers.AutoConfig.for_model(model_type, **_HF_TINY, **_SSM[kind])
    cfg._experts_implementation = "batched_mm"   # Jamba's experts (see _moe)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    return HybridCacheDecoder(model.eval()).eval()


def _moe(kind: str) -> torch.nn.Module:
    import transformers
    from hybrid_models import HybridCacheDecoder
    if kind == "lfm2_moe":    # LFM2's short convolutions + attention, routed experts
        cfg = transformers.Lfm2MoeConfig(
            layer_types=["conv", "full_attention"], num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=16, num_dense_layers=0, **_HF_TINY)
        cfg._experts_implementation = "batched_mm"
        return HybridCacheDecoder(transformers.Lfm2MoeForCausalLM(cfg).eval()).eval()
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
    # in the order ExecuTorch's export_llama applies its source transforms (`llama_kv`: none,
    # its default static KV cache)
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


def _hybrid(kind: str) -> torch.nn.Module:
    import hybrid_models
    return hybrid_models.build(kind)


_SLIDING = dict(num_hidden_layers=2, sliding_window=4,
                layer_types=["sliding_attention", "full_attention"])
# beyond hf_models.TINY (one layer): what each family needs to be tiny and valid
_DECODER = {
    "gpt_neox": dict(num_key_value_heads=2),        # no grouped-query attention
    "gpt2": dict(num_key_value_heads=2, n_inner=32),
    "gemma2": _SLIDING, "cohere2": _SLIDING,
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16),
    "gpt_oss": dict(_SLIDING, num_local_experts=4, num_experts_per_tok=2),
}


def _decoder(kind: str) -> torch.nn.Module:
    import transformers
    from hf_models import MODELS, TINY, Stepped, _model
    if kind in MODELS:          # the decoders test_hf_transformers exports, as it builds them
        return Stepped(_model(kind)).eval()
    # no padding index: several families' defaults lie outside the tiny vocabulary
    cfg = transformers.AutoConfig.for_model(kind, **{**TINY, "num_hidden_layers": 1,
                                                     "pad_token_id": None,
                                                     **_DECODER.get(kind, {})})
    cfg._experts_implementation = "batched_mm"   # as for qwen35_moe (no effect on dense ones)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    model.generation_config.cache_implementation = "static"
    return Stepped(model).eval()


def _token_args(step: int) -> tuple[torch.Tensor, ...]:
    return torch.tensor([[(7 * step + 3) % 64]]), torch.tensor([step])


@functools.cache
def _encoder_states() -> torch.Tensor:
    return torch.randn(1, 6, 32, generator=torch.Generator().manual_seed(5))


def _seq2seq_args(step: int) -> tuple[torch.Tensor, ...]:
    return torch.tensor([[(5 * step + 1) % 128]]), _encoder_states(), torch.tensor([step])


_BUILD: dict[str, Callable[[str], torch.nn.Module]] = {
    **{k: _ssm for k in SSM}, **{k: _moe for k in MOE}, **{k: _seq2seq for k in SEQ2SEQ},
    **{k: _llama for k in LLAMA}, **{k: _hybrid for k in HYBRID},
    **{k: _decoder for k in DECODER}}


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



# ExecuTorch's caches written in place by its `llama::update_cache` op (quantized too), a host op
HOST_CACHE = ("llama_custom_sdpa", "llama_quantized_kv", "llama_quantized_sdpa", "llama_ring")
# the families also saved with TensorRT-RTX engines by test_model_families_rtx.py
# (the hybrids' RTX conversion is test_hybrid_state's, transformers' static-cache decoders'
# test_hf_rtx's; the other families' state is of the same kinds, and CI time is counted)
RTX = ("mamba2", "bamba", "granite_hybrid", "qwen35_moe") + SEQ2SEQ + HOST_CACHE


def _is_kv_cache(fqn: str) -> bool:
    leaf = fqn.rsplit(".", 1)[-1]
    return leaf.startswith(("key_cache", "value_cache", "k_cache", "v_cache"))


def expected_plan(kind: str, fqn: str) -> str:
    """What each family's state is, from the models' own code: SSM conv/recurrent states are
    whole-tensor rewrites (copy-back by an engine); static KV caches (transformers', ExecuTorch's
    default one) are aliased by the engine; ExecuTorch's custom KV caches are written in place by
    `llama::update_cache` (quantized too), a host op; positions/counters are small copy-back
    state."""
    if kind in HOST_CACHE and "cache_positions" not in fqn:
        return "host"
    return "KV" if _is_kv_cache(fqn) else "COPY_BACK"


def check_steps_like_eager(kind: str) -> None:
    """The family through the patched `torch_tensorrt` API on reference engines, held to eager for
    `STEPS` steps by the generator's own checker (every output, and every buffer eager changes,
    from the compiled module and from the `.pte`); the plan holds exactly the buffers eager
    writes, each as `expected_plan` says, with the engine binding carrying its final value; and
    the bytes the delegates copy per call: a KV cache an engine aliases moves 0 B, a copy-back
    buffer exactly its size, a buffer only read 0 B, a cache a host op writes in place 0 B
    through the delegates (with state on the device, the program also stages a buffer a host
    kernel touches across the link each call, as `inspect` counts from the file)."""
    from rtx_env import torch_tensorrt_or_skip
    from stateful_check import check_program

    from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
    torch_tensorrt_or_skip()
    program, seen = ModelProgram(kind), {}
    result = check_program(program, steps=STEPS, observe=seen.__setitem__)
    assert result.ok, result.report(program)
    assert program.fqns(), f"{kind}: eager changed no buffer"
    plan = {w.fqn: w for w in seen["plan"]}
    assert set(plan) == set(program.fqns()), (sorted(plan), program.fqns())
    buffers = {b.fqn: b for b in inspect_pte(seen["pte"]).method("forward").buffers}
    link = {f: b.program_link_bytes for f, b in buffers.items()}
    model = program.build()
    for fqn in program.fqns():
        w, want = plan[fqn], expected_plan(kind, fqn)
        got = "host" if w.engine is None else "KV" if w.is_kv else "COPY_BACK"
        assert got == want, f"{kind} {fqn}: planned {got} ({w.reason}), expected {want}"
        if want != "host":   # the engine binding carrying the buffer's final value
            assert w.output_binding, str(w)
        b = model.get_buffer(fqn)
        moved = (b.numel() * b.element_size() if want == "COPY_BACK" else 0) + link[fqn]
        assert seen["traffic"][fqn] == moved, (kind, fqn, seen["traffic"][fqn], moved)
        if want == "host":   # inspect names the host kernel writing it (state on the device:
            # the program also copies it across the link, so it is the program's copy-back)
            assert buffers[fqn].kind == ("copy_back" if link[fqn] else "in_place"), buffers[fqn]
            assert "host kernels write it in place: llama::update_cache" in \
                buffers[fqn].host_path, buffers[fqn]
    # a buffer only read (a mask, rotary frequencies) is state on a device too: it never moves
    read = {f: n for f, n in seen["traffic"].items() if f not in plan}
    assert read == dict.fromkeys(read, 0), read


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


def llama_calls(vocab: int = 128, positions=lambda start, n: torch.tensor([start])):
    """A 5-token prefill, decodes, a 3-token prefill at position 8, a decode; reset, a 2-token
    prefill, a decode — token ids below `vocab`, a call's positions `positions(start, n)` (its
    start alone, as ExecuTorch's llama takes them, by default)."""
    g = torch.Generator().manual_seed(0)

    def call(name, start, n):
        return name, (torch.randint(0, vocab, (1, n), generator=g), positions(start, n))

    return [call("prefill", 0, 5)] + [call("decode", p, 1) for p in (5, 6, 7)] + \
        [call("prefill", 8, 3), call("decode", 11, 1), ("reset", ()), call("prefill", 0, 2),
         call("decode", 2, 1)]


def gemma4_methods(path: str = "reference", cache: str = "index_copy", sdpa: str = "custom"):
    """ExecuTorch's Gemma 4 text decoder (`examples.models.gemma4`; a tiny config of five layers
    — sliding and full attention, the last two reading the caches of earlier layers (KV sharing),
    per-layer embeddings, partial rotary — with `enable_dynamic_shape`) as two methods of one
    module, exported as its script exports the decoder: `prefill` (token ids and positions of a
    dynamic length, up to 15) and `decode` (one token). Returns `(ModelMethods, eager)`, eager
    called `(input_ids, input_pos)`. `cache`: "index_copy" (`use_index_copy_for_kv_cache`) or
    "narrow", its default (`narrow(2, start, T).copy_` at a start read with `.item()`, attention
    over the caches' valid prefix `[:start + T]`: sizes read from data); `sdpa`: "custom" (its
    `llama::custom_sdpa`, run outside the engines, over the prefix views) or "torch"
    (PyTorch's, inside an engine)."""
    import copy

    import pytest
    pytest.importorskip("executorch.extension.llm.custom_ops.custom_ops")
    from executorch.examples.models.gemma4.text_decoder.gemma4_config import Gemma4Config
    from executorch.examples.models.gemma4.text_decoder.gemma4_model import Gemma4Model

    from method_check import ModelMethods
    torch.manual_seed(0)
    cfg = Gemma4Config(
        hidden_size=32, num_hidden_layers=5, num_attention_heads=2, num_key_value_heads=1,
        head_dim=8, global_head_dim=16, vocab_size=64, intermediate_size=64, sliding_window=4,
        layer_types=["sliding_attention", "sliding_attention", "full_attention",
                     "sliding_attention", "full_attention"],
        query_pre_attn_scalar=8, hidden_size_per_layer_input=8, vocab_size_per_layer_input=64,
        num_kv_shared_layers=2, max_seq_len=16, max_context_len=16, enable_dynamic_shape=True,
        use_custom_sdpa=sdpa == "custom", use_kv_cache=True,
        use_index_copy_for_kv_cache=cache == "index_copy")
    model = Gemma4Model(config=cfg, dtype=torch.float32).get_eager_model().eval()
    eager = copy.deepcopy(model)
    t = torch.export.Dim("seq_len", min=1, max=15)
    args = {"prefill": (torch.tensor([[1, 5, 7, 9]]), torch.arange(4)),
            "decode": (torch.tensor([[3]]), torch.tensor([4]))}
    dims = {"prefill": {"input_ids": {1: t}, "input_pos": {0: t}}}
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]), torch.no_grad():
        eps = {n: None if path == "recipe" else torch.export.export(
            model, a, dynamic_shapes=dims.get(n)) for n, a in args.items()}
    return ModelMethods(eps, args, {}, dims, {n: model for n in args}, path), eager
