"""transformers decoders with tiny random configs (nothing downloaded), as transformers documents
their ExecuTorch export: `_model(name)` with a static cache, `_tokens(step, n)` deterministic
token ids, `_eager(model)` the recipe module transformers exports, run in PyTorch (`Stepped(model)`
called positionally and castable with `.to`), `_as_near_fp32_as_eager` the half-precision
criterion."""
from __future__ import annotations

import copy
import os
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from stateful_check import as_near_fp32_as_eager  # noqa: E402

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


def _as_near_fp32_as_eager(got, want, exact, what):
    """`got` (ours, half precision) as near `exact` (fp32) as eager's `want` (the same model in
    that precision): stateful_check.as_near_fp32_as_eager, asserted."""
    why = as_near_fp32_as_eager(got, want, exact)
    assert not why, f"{what}: {why}"


def _eager(model):
    """The eager reference: the same recipe module transformers exports, run in PyTorch."""
    return TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=MAX_CACHE).model


class Stepped(torch.nn.Module):
    """`_eager(model)` called positionally, `(input_ids, cache_position)`, as ExecuTorch's export
    API passes example inputs; `.to(dtype)` casts it as it casts any module — transformers' static
    cache keeps its layers on the buffers the wrapper registers, so they follow the cast."""

    def __init__(self, model):
        super().__init__()
        self.lm = _eager(model)

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        for i, layer in enumerate(self.lm.static_cache.layers):
            layer.keys = getattr(self.lm, f"key_cache_{i}")
            layer.values = getattr(self.lm, f"value_cache_{i}")
            layer.cumulative_length = getattr(self.lm, f"cumulative_length_{i}")
        return self

    def forward(self, input_ids, cache_position):
        return self.lm(input_ids=input_ids, cache_position=cache_position)


def _whisper(max_cache: int, decoder_layers: int = 1):
    """A tiny random WhisperForConditionalGeneration (8 mel bins, 8 encoder positions)."""
    torch.manual_seed(0)
    cfg = transformers.WhisperConfig(
        vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=decoder_layers,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, num_mel_bins=8, max_source_positions=WHISPER_POSITIONS,
        max_target_positions=max_cache, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=1)
    return transformers.WhisperForConditionalGeneration(cfg).eval()


WHISPER_POSITIONS = 8          # the encoder's output length (its input: twice as many frames)


def whisper_features(seed: int) -> torch.Tensor:
    """Input features (1, 8 mel bins, 16 frames) of one utterance."""
    return torch.randn(1, 8, 2 * WHISPER_POSITIONS, generator=torch.Generator().manual_seed(seed))


def whisper_methods(max_cache: int = MAX_CACHE):
    """A tiny random Whisper as two methods of one program: `encoder` (input features -> hidden
    states, stateless) and `decoder` (transformers' own static-cache decoder export module:
    token, encoder states, position -> logits; its self-attention caches are the state)."""
    from transformers.integrations.executorch import (
        Seq2SeqLMDecoderExportableModuleWithStaticCache)
    model = _whisper(max_cache)
    model.lm_head = model.proj_out      # the name transformers' decoder module reads

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = model.get_encoder()

        def forward(self, features):
            return self.encoder(input_features=features).last_hidden_state

    decoder = Seq2SeqLMDecoderExportableModuleWithStaticCache(model, max_cache, 1).eval()
    return Encoder().eval(), decoder


class WhisperCrossCache(torch.nn.Module):
    """Whisper's decoding as a runner steps it, on transformers' own modules and caches: the
    cross-attention keys and values computed from the encoder's states once, at the first step
    of an utterance, into a cross-attention cache that every later step only reads. Methods:
    `encode(features)` (stateless), `start(token, states, position)` (fills the cross cache,
    writes the self-attention cache at `position`) and `step(token, position)` (reads the cross
    cache, writes the self-attention cache; no encoder states: transformers' attention takes the
    cross cache's keys once its `is_updated` says so). State: each layer's self- and
    cross-attention keys, values and lengths (transformers' StaticCache layers, registered as
    buffers)."""

    def __init__(self, model, max_cache: int):
        super().__init__()
        from transformers.cache_utils import EncoderDecoderCache, StaticCache
        from transformers.integrations.executorch import get_head_shapes
        self.encoder, self.decoder = model.get_encoder(), model.get_decoder()
        self.proj_out = model.proj_out
        heads, head_dim = get_head_shapes(model.config)
        caches = {}
        for kind, length in (("self", max_cache), ("cross", WHISPER_POSITIONS)):
            cache = caches[kind] = StaticCache(config=model.config, max_cache_len=length)
            cache.early_initialization(1, heads, head_dim, torch.float32, torch.device("cpu"))
        self.cache = EncoderDecoderCache(caches["self"], caches["cross"])
        self._bind()

    def _bind(self):
        """Register the caches' tensors as buffers (a first call), or point the cache layers at
        the module's buffers again — at every call, so that torch.export's tracing, which swaps
        the module's buffers for its own, traces the layers' reads and writes on them (a layer
        holding the real tensor would have its writes run on it, changing the values the
        exported program keeps as its initial state), and after `.to`."""
        for kind, cache in (("self", self.cache.self_attention_cache),
                            ("cross", self.cache.cross_attention_cache)):
            for i, layer in enumerate(cache.layers):
                for attr, name in (("keys", "keys"), ("values", "values"),
                                   ("cumulative_length", "length")):
                    key = f"{kind}_{name}_{i}"
                    if key in self._buffers:
                        setattr(layer, attr, self._buffers[key])
                    else:
                        self.register_buffer(key, getattr(layer, attr), persistent=False)

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        self._bind()
        return self

    def encode(self, features):
        return self.encoder(input_features=features).last_hidden_state

    def _decode(self, token, states, position, cross_filled: bool):
        for layer in self.cache.self_attention_cache.layers:
            layer.cumulative_length.copy_(position[0])
        for i in range(len(self.cache.cross_attention_cache.layers)):
            self.cache.is_updated[i] = cross_filled
        out = self.decoder(input_ids=token, encoder_hidden_states=states, cache=self.cache,
                           use_cache=True)
        return self.proj_out(out[0])

    def start(self, token, states, position):
        self._bind()
        for layer in self.cache.cross_attention_cache.layers:
            layer.cumulative_length.zero_()
        return self._decode(token, states, position, False)

    def step(self, token, position):
        # the decoder layers run their cross-attention only given encoder states: a placeholder
        # of their shape, never read (the keys and values come from the cross cache)
        self._bind()
        states = torch.zeros(1, WHISPER_POSITIONS, self.proj_out.in_features)
        return self._decode(token, states, position, True)


class _Method(torch.nn.Module):
    """Method `name` of `program` as the module torch.export takes (one owner: every method's
    buffers have the same names)."""

    def __init__(self, program: torch.nn.Module, name: str):
        super().__init__()
        self.program, self.name = program, name

    def forward(self, *args):
        return getattr(self.program, self.name)(*args)


WHISPER_CROSS_METHODS = ("encode", "start", "step")


def whisper_cross_cache_methods(path: str = "reference", max_cache: int = MAX_CACHE):
    """`WhisperCrossCache` (two decoder layers) as three methods of one program, each exported
    non-strict as transformers' export helpers do. Returns `(ModelMethods, eager)`: `eager` a
    copy of one method's module in its initial state (its buffers named as the program's state),
    the program's methods called as `getattr(eager.program, name)`."""
    from method_check import ModelMethods
    program = WhisperCrossCache(_whisper(max_cache, decoder_layers=2), max_cache).eval()
    modules = {n: _Method(program, n) for n in WHISPER_CROSS_METHODS}
    eager = copy.deepcopy(modules["encode"])
    token = torch.tensor([[1]])
    with torch.no_grad():
        states = program.encode(whisper_features(0))
    args = {"encode": (whisper_features(0),), "start": (token, states, torch.tensor([0])),
            "step": (token, torch.tensor([1]))}

    def export(n):
        with torch.no_grad():
            return torch.export.export(copy.deepcopy(modules[n]), args[n], strict=False)

    eps = {n: _exported_on(path, lambda n=n: export(n)) for n in WHISPER_CROSS_METHODS}
    return ModelMethods(eps, args, {}, {}, modules, path, strict=False), eager


def t5_methods(path: str = "reference", max_len: int = MAX_CACHE):
    """A tiny random T5 as transformers' `Seq2SeqLMExportableModule` exports it for ExecuTorch:
    `encoder` (token ids of a dynamic length -> hidden states, stateless) and `decoder` (its
    static-cache decoder module: one token, the encoder's states of a dynamic length, the position
    -> logits; its self-attention caches and lengths are the state; the cross-attention keys are
    computed from the states every call). Both exported as that helper does (strict, the same
    dynamic dimensions). Returns `(ModelMethods, encoder, decoder)`, the last two eager modules
    (the decoder's buffers are the program's state, in their initial values)."""
    from transformers.integrations.executorch import (
        Seq2SeqLMDecoderExportableModuleWithStaticCache, Seq2SeqLMEncoderExportableModule)

    from method_check import ModelMethods
    torch.manual_seed(0)
    cfg = transformers.T5Config(vocab_size=TINY["vocab_size"], d_model=16, d_ff=32, num_layers=2,
                                num_decoder_layers=2, num_heads=2, d_kv=8,
                                decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    model = transformers.T5ForConditionalGeneration(cfg).eval()
    encoder = Seq2SeqLMEncoderExportableModule(model.get_encoder()).eval()
    decoder = Seq2SeqLMDecoderExportableModuleWithStaticCache(model, max_len, 1).eval()
    ids = _tokens(0, 6)
    with torch.no_grad():
        states = encoder(ids)
    args = {"encoder": (ids,), "decoder": (_tokens(0), states, torch.tensor([0]))}
    dims = {"encoder": {"input_ids": {1: torch.export.Dim("encoder_seq_length", max=max_len)}},
            "decoder": {"decoder_input_ids": None, "cache_position": None,
                        "encoder_hidden_states": {
                            1: torch.export.Dim("encoder_hidden_seq_length", max=max_len)}}}
    # the program's decoder: a module of its own (its caches its own; the weights are shared)
    modules = {"encoder": encoder,
               "decoder": Seq2SeqLMDecoderExportableModuleWithStaticCache(model, max_len, 1).eval()}
    eps = {n: _exported_on(path, lambda n=n: torch.export.export(
        modules[n], args[n], dynamic_shapes=dims[n], strict=True)) for n in modules}
    return ModelMethods(eps, args, {}, dims, modules, path), encoder, decoder


def t5_decoder_call(decoder, *args):
    """The eager decoder called as its exported program runs: the cross-attention keys computed
    from this call's encoder states. (Eager keeps them in a Python `DynamicCache` filled by its
    first call and reused by every later one, also for another sentence's states; the program,
    traced with that cache empty, computes them every call.)"""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache
    decoder.cache = EncoderDecoderCache(decoder.static_cache, DynamicCache(config=decoder.config))
    return decoder(*args)


PREFILL, MAX_PREFILL = 4, 8


def _exported_on(path: str, export: Callable[[], torch.export.ExportedProgram]):
    """`export()`, or None on the recipe path (ExecuTorch's export API exports the modules)."""
    return None if path == "recipe" else export()


def llm_methods(path: str = "reference", name: str = "llama"):
    """A tiny random transformers decoder-only LM (`MODELS[name]`) as two methods of one module,
    each exported by transformers' own `TorchExportableModuleForDecoderOnlyLM.export` (strict, as
    documented): `prefill` (a dynamic sequence length, up to `MAX_PREFILL`) and `decode` (one
    token), sharing its static KV cache. Returns `(ModelMethods, eager)`: `eager` a copy of the
    module whose buffers are the program's state, in its initial state (transformers' static-cache
    module; on the recipe path `Stepped(model)`, which ExecuTorch's API exports itself,
    positionally), called `eager(input_ids=..., cache_position=...)`."""
    from method_check import ModelMethods
    model = _model(name)
    exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=MAX_CACHE)
    seq = torch.export.Dim("seq", max=MAX_PREFILL)
    kwargs = {"prefill": dict(input_ids=_tokens(0, PREFILL), cache_position=torch.arange(PREFILL)),
              "decode": dict(input_ids=_tokens(0), cache_position=torch.tensor([0]))}
    dims = {"prefill": {"input_ids": {1: seq}, "cache_position": {0: seq}}}
    root = Stepped(model).eval() if path == "recipe" else exportable.model
    eager = copy.deepcopy(root)
    eps = {n: _exported_on(path, lambda kw=kw, n=n: exportable.export(
        **kw, dynamic_shapes=dims.get(n))) for n, kw in kwargs.items()}
    return ModelMethods(eps, {}, kwargs, dims, {n: root for n in kwargs}, path), eager


class _Embeds(Stepped):
    """`Stepped` taking input embeddings: `(inputs_embeds, cache_position)`."""

    def forward(self, inputs_embeds, cache_position):
        return self.lm(inputs_embeds=inputs_embeds, cache_position=cache_position)


# one 64x64 image: 64 patches of 8, pixel-shuffled by 4 into IMAGE_TOKENS tokens (the vision
# encoder's activations outgrow the text decoder's whole arena)
IMAGE, IMAGE_TOKENS = (1, 3, 64, 64), 4


def _image(seed: int) -> torch.Tensor:
    return torch.randn(*IMAGE, generator=torch.Generator().manual_seed(seed))


def smolvlm_methods(path: str = "reference"):
    """A tiny random SmolVLM (transformers' `SmolVLMForConditionalGeneration`, the model its
    `TorchExportableModuleForVLM` targets) in ExecuTorch's multimodal layout, three methods:
    `vision_encoder` (pixels -> image tokens in the text embedding space: the vision transformer
    then the connector, exported non-strict as transformers exports them), `token_embedding`
    (token ids, a dynamic length -> embeddings) — both stateless — and `text_decoder`
    (embeddings, a dynamic length, and positions -> logits: transformers'
    `TorchExportableModuleForDecoderOnlyLM.export(inputs_embeds=...)`, which holds the static KV
    cache). Returns `(ModelMethods, eager, call)`: `eager` a copy of the text decoder's module in
    its initial state, `call(method, args)` runs a method eagerly (the text decoder on `eager`)."""
    from method_check import ModelMethods
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration
    torch.manual_seed(0)
    text = dict(model_type="llama", **TINY, num_hidden_layers=1)
    cfg = SmolVLMConfig(
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                           num_attention_heads=2, image_size=IMAGE[-1], patch_size=8),
        text_config=text, scale_factor=4, image_token_id=TINY["vocab_size"] - 1)
    model = SmolVLMForConditionalGeneration(cfg).eval()
    model.generation_config.cache_implementation = "static"

    class VisionEncoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.vision, self.connector = model.model.vision_model, model.model.connector

        def forward(self, pixel_values):
            return self.connector(self.vision(pixel_values=pixel_values).last_hidden_state)

    vision, embedding = VisionEncoder().eval(), model.get_input_embeddings()
    exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=MAX_CACHE)
    seq = torch.export.Dim("seq", max=MAX_PREFILL)
    with torch.no_grad():
        embeds = embedding(_tokens(0, 3))
    args = {"vision_encoder": (_image(0),), "token_embedding": (_tokens(0, 3),)}
    kwargs = {"text_decoder": dict(inputs_embeds=embeds, cache_position=torch.arange(3))}
    dims = {"token_embedding": ({1: seq},),
            "text_decoder": {"inputs_embeds": {1: seq}, "cache_position": {0: seq}}}
    decoder = _Embeds(model).eval() if path == "recipe" else exportable.model
    eager = copy.deepcopy(decoder)
    eps = {"vision_encoder": _exported_on(path, lambda: torch.export.export(
               vision, args["vision_encoder"], strict=False)),
           "token_embedding": _exported_on(path, lambda: torch.export.export(
               embedding, args["token_embedding"], dynamic_shapes=dims["token_embedding"],
               strict=False)),
           "text_decoder": _exported_on(path, lambda: exportable.export(
               **kwargs["text_decoder"], dynamic_shapes=dims["text_decoder"]))}
    modules = {"vision_encoder": vision, "token_embedding": embedding, "text_decoder": decoder}

    def call(name, args):
        if name == "text_decoder":
            return eager(inputs_embeds=args[0], cache_position=args[1])
        return modules[name](*args)

    return ModelMethods(eps, args, kwargs, dims, modules, path), eager, call
