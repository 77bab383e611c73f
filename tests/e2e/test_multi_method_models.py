"""Real models of several methods (transformers, tiny configs, random init): each method exported
as its authors export it, saved as one program on the multi-method save paths, and stepped against
eager across interleaved calls of every method — state by FQN after every call.

Whisper: transformers' encoder and its static-cache decoder export module; the encoder (stateless)
is called before every decoder step, so a method that touches no state runs between calls of one
that does, and the decoder's caches must come through unchanged. Whisper again as a runner steps
it (`hf_models.WhisperCrossCache`, transformers' own attention and caches): the first decoder step
of an utterance fills the cross-attention cache, every later step only reads it. T5 as transformers'
`Seq2SeqLMExportableModule` exports it: the same layout, both methods of a dynamic length.

An LLM through transformers' own ExecuTorch export (`TorchExportableModuleForDecoderOnlyLM
.export`, a dynamic-length `prefill` beside a one-token `decode`), SmolVLM in ExecuTorch's
multimodal layout (`vision_encoder`, `token_embedding`, `text_decoder`: the image's tokens and the
prompt's embeddings computed between decoder steps), ExecuTorch's Voxtral Realtime as its
streaming export lays it out (`encode_audio_chunk` with conv states and ring caches,
`text_decoder` with its own ring caches, `token_embedding`; `streaming_models`): each saved on
every multi-method save path
(`method_check.SAVERS`: reference, upstream, recipe — ExecuTorch's export API with our TensorRT
recipe), then its methods called interleaved — decodes after a prefill, a second prefill at a later
position, stateless methods between decoder steps, a reset and a new sequence — each call's outputs
and every buffer of the program's state (by FQN) equal to an eager copy called the same way.
ExecuTorch's own decoders (llama, Gemma 4) are in test_executorch_decoder_methods.py.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

from hf_models import (IMAGE_TOKENS, MAX_PREFILL, PREFILL, _image, _tokens, llm_methods,
                       smolvlm_methods, t5_decoder_call, t5_methods, whisper_cross_cache_methods,
                       whisper_features, whisper_methods)
from method_check import ModelMethods, saved_and_loaded, saver_params, step_like_eager
from streaming_models import voxtral_call, voxtral_calls, voxtral_methods

pytestmark = [pytest.mark.inspects_pte]


PATHS = saver_params()


@pytest.mark.parametrize("path_kind", ["reference", "upstream"])
def test_whisper_encoder_between_decoder_steps_like_eager(tmp_path, path_kind):
    encoder, decoder = whisper_methods()
    features = torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        states = encoder(features)
    args = {"encoder": (features,), "decoder": (torch.tensor([[1]]), states, torch.tensor([0]))}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        programs = {"encoder": torch.export.export(encoder, args["encoder"]),
                    "decoder": torch.export.export(copy.deepcopy(decoder), args["decoder"])}
    prog = saved_and_loaded(ModelMethods(programs, args, path=path_kind), tmp_path)
    eager, token = copy.deepcopy(decoder), torch.tensor([[1]])
    caches = [n for n, _ in eager.named_buffers() if "_cache_" in n]
    for step in range(6):
        other = torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(step + 1))
        with torch.no_grad():
            want_states = encoder(other)
            want = eager(token, states, torch.tensor([step]))
        torch.testing.assert_close(prog.run(other, method="encoder")[0], want_states,
                                   rtol=1e-5, atol=1e-5)
        got = prog.run(token, states, torch.tensor([step]), method="decoder")[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m: f"{step}: {m}")
        state = prog.state()
        for name in caches:
            torch.testing.assert_close(state[name], eager.get_buffer(name), rtol=1e-5,
                                       atol=1e-5, msg=lambda m: f"{step} {name}: {m}")
        token = want.argmax(-1)


def _whisper_cross_calls(encode):
    """Three utterances: each encoded, its first decoder step filling the cross-attention cache,
    later steps reading it with the next utterance's audio encoded between them; the second
    utterance starts without a reset (its first step refills the cross cache), the third after
    one."""
    for utterance, (steps, reset) in enumerate(((4, False), (3, False), (2, True))):
        if reset:
            yield "reset", ()
        features = whisper_features(10 * utterance)
        yield "encode", (features,)
        yield "start", (_tokens(utterance), encode(features), torch.tensor([0]))
        for position in range(1, steps):
            yield "encode", (whisper_features(10 * utterance + position),)
            yield "step", (_tokens(utterance + position), torch.tensor([position]))


@pytest.mark.parametrize("path_kind", PATHS)
def test_whisper_cross_attention_cache_filled_at_the_first_step_like_eager(tmp_path, path_kind):
    """Whisper decoding as a runner steps it, on transformers' own attention and caches: `start`
    writes the cross-attention cache from the encoder's states, `step` only reads it (it is given
    no encoder states), the stateless encoder runs between the steps. A `step` reading the cross
    cache's initial value (a constant snapshot) or a copy `start` never wrote differs from eager
    at the first step after `start`."""
    methods, eager = whisper_cross_cache_methods(path_kind)
    prog = saved_and_loaded(methods, tmp_path)

    def encode(features):
        with torch.no_grad():
            return eager.program.encode(features)

    calls = list(_whisper_cross_calls(encode))
    step_like_eager(prog, eager, lambda name, a: getattr(eager.program, name)(*a), calls)
    cross = [n for n in prog.state() if "cross_keys" in n]
    assert len(cross) == 2 and all(prog.state()[n].abs().sum() > 0 for n in cross), cross


def _t5_calls(encode):
    """A source sentence encoded, decoded token by token with other sentences (of other lengths)
    encoded between the steps; a second, longer one decoded from position 0 again (the decoder
    restarts its lengths itself); after a reset, a short one."""
    for length, steps, start in ((6, 4, 0), (11, 3, 20), (3, 2, 40)):
        if start == 40:
            yield "reset", ()
        source = _tokens(start, length)
        yield "encoder", (source,)
        for i in range(steps):
            yield "decoder", (_tokens(start + i), encode(source), torch.tensor([i]))
            yield "encoder", (_tokens(start + 50, 2 + i),)


@pytest.mark.parametrize("path_kind", PATHS)
def test_t5_encoder_between_decoder_steps_like_eager(tmp_path, path_kind):
    """transformers' own seq2seq export (`Seq2SeqLMExportableModule`'s modules, strict — the
    recipe's default too — and its dynamic dimensions): both methods take a dynamic length, the
    decoder's caches are the state, and the stateless encoder runs between its steps at other
    lengths."""
    methods, encoder, decoder = t5_methods(path_kind)
    prog = saved_and_loaded(methods, tmp_path)
    with torch.no_grad():
        calls = list(_t5_calls(lambda ids: encoder(ids)))
    step_like_eager(prog, decoder, lambda name, a: encoder(*a) if name == "encoder"
                    else t5_decoder_call(decoder, *a), calls)


def _ids_at(start: int, n: int = 1):
    return _tokens(start, n), torch.arange(start, start + n)


# prefill 4, decode x3, prefill 3 more at position 7 (the prompt goes on), decode; reset, a new
# sequence of other tokens: prefill 2, decode
LM_CALLS = [("prefill", _ids_at(0, PREFILL))] + [("decode", _ids_at(p)) for p in (4, 5, 6)] + \
    [("prefill", _ids_at(7, 3)), ("decode", _ids_at(10)), ("reset", ()),
     ("prefill", (_tokens(20, 2), torch.arange(2))), ("decode", (_tokens(30), torch.tensor([2])))]


@pytest.mark.parametrize("path_kind", PATHS)
def test_transformers_lm_prefill_and_decode_interleaved_like_eager(tmp_path, path_kind):
    """transformers' own export: `prefill` of any length up to MAX_PREFILL and `decode` sharing
    the static cache; the second prefill starts where the decodes left off."""
    methods, eager = llm_methods(path_kind)
    assert methods.dynamic_shapes("prefill") and max(a[0].shape[1] for _, a in LM_CALLS
                                                     if a) <= MAX_PREFILL
    prog = saved_and_loaded(methods, tmp_path)
    step_like_eager(prog, eager, lambda name, a: eager(input_ids=a[0], cache_position=a[1]),
                    LM_CALLS)


def _vlm_calls(embed):
    """ExecuTorch's multimodal runner's order: the prompt's text and image tokens, each turned
    into embeddings by its method, prefilled; decodes, each token embedded first; a second image
    encoded between decoder steps and prefilled (with a token of text) at a later position; after
    a reset, a text-only prompt."""
    calls = [("token_embedding", (_tokens(0, 2),)), ("vision_encoder", (_image(1),))]
    yield from calls
    # the embeddings are what the program returned for the calls above: eager's (checked equal)
    at = 2 + IMAGE_TOKENS
    yield "text_decoder", (torch.cat([embed(*calls[0]), embed(*calls[1])], 1), torch.arange(at))
    for p in (at, at + 1):
        yield "token_embedding", (_tokens(p),)
        yield "text_decoder", (embed("token_embedding", (_tokens(p),)), torch.tensor([p]))
    at += 2
    yield "vision_encoder", (_image(2),)
    yield "token_embedding", (_tokens(at),)
    both = torch.cat([embed("vision_encoder", (_image(2),)),
                      embed("token_embedding", (_tokens(at),))], 1)
    yield "text_decoder", (both, torch.arange(at, at + IMAGE_TOKENS + 1))
    at += IMAGE_TOKENS + 1
    yield "token_embedding", (_tokens(at),)
    yield "text_decoder", (embed("token_embedding", (_tokens(at),)), torch.tensor([at]))
    # a new conversation: the state reset, a text-only prompt, then an image the next turn takes
    yield "reset", ()
    yield "token_embedding", (_tokens(40, 3),)
    yield "text_decoder", (embed("token_embedding", (_tokens(40, 3),)), torch.arange(3))
    yield "vision_encoder", (_image(3),)


@pytest.mark.parametrize("path_kind", PATHS)
def test_smolvlm_vision_embedding_and_decoder_interleaved_like_eager(tmp_path, path_kind):
    methods, eager, call = smolvlm_methods(path_kind)
    prog = saved_and_loaded(methods, tmp_path)

    def embed(name, args):
        with torch.no_grad():
            return call(name, args)

    calls = list(_vlm_calls(embed))
    assert {n for n, _ in calls} == {*methods.names(), "reset"}
    step_like_eager(prog, eager, call, calls)


# Voxtral Realtime's "cuda" backend (index_copy_ ring caches, PyTorch's SDPA: what a GPU export
# takes) on every path; its "portable" one (ExecuTorch's custom ring-cache and SDPA ops) on
# upstream's
VOXTRAL = [pytest.param("cuda", *p.values, marks=p.marks, id=f"cuda-{p.values[0]}")
           for p in PATHS] + [pytest.param("portable", "upstream", id="portable-upstream")]


@pytest.mark.parametrize("backend,path_kind", VOXTRAL)
def test_voxtral_realtime_streams_audio_chunks_between_decoder_steps_like_eager(
        tmp_path, backend, path_kind):
    """Audio chunks encoded between decoder steps, both ring caches past their windows, a second
    session restarting the encoder at position 0 without a reset (its conv states reset
    in-graph), a reset, a third session."""
    methods, eager = voxtral_methods(path_kind, backend)
    prog = saved_and_loaded(methods, tmp_path)
    step_like_eager(prog, eager, lambda name, a: voxtral_call(eager, name, a), voxtral_calls(),
                    tol=1e-4)
