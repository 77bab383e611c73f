"""ExecuTorch's Voxtral Realtime (`executorch.examples.models.voxtral_realtime`; a tiny config,
random init, nothing downloaded) laid out as its streaming export (`export_streaming`) lays it
out: three methods of one program, each exported strict as that script does —

* `encode_audio_chunk`: an 8-frame mel chunk and its 4 encoder positions -> one audio embedding.
  Its state: two conv states (each call multiplies them by "not at position 0" — a session
  restarting at 0 resets them in-graph — then copies the chunk's last frames in) and a ring KV
  cache per encoder layer, written at `positions % (2 * window)`, so a long session wraps;
* `text_decoder`: embeddings of a dynamic length and their positions -> logits, with a ring KV
  cache per layer (the decoder's sliding window);
* `token_embedding`: token ids of a dynamic length -> embeddings (stateless, the decoder's tied
  embedding).

Two of the model's backends: "cuda" (what a GPU export takes: `index_copy_` ring caches, boolean
masks, PyTorch's SDPA) and "portable" (ExecuTorch's custom ops: `llama::update_cache_with_indices`
and its custom SDPA). The encoder's and the decoder's states are disjoint, the weights are shared
(the token embedding is the decoder's output projection too).

Invariant: `voxtral_methods(...)` returns the program's methods (`method_check.ModelMethods`) and
an eager copy of the same module in its initial state; `voxtral_calls()` is a session as a
streaming runner makes it — chunks encoded between decoder steps, prompt then single tokens, past
both windows, a second session restarting the encoder at 0 without a reset, a reset, a third.
"""
from __future__ import annotations

import copy

import torch

ENC_WINDOW, DEC_WINDOW, MAX_SEQ, DIM, MELS, VOCAB = 4, 8, 32, 32, 16, 64
NAMES = ("encode_audio_chunk", "text_decoder", "token_embedding")


class _Program(torch.nn.Module):
    """The three modules the streaming export exports, under one root (one FQN per buffer)."""

    def __init__(self, backend: str):
        from executorch.examples.models.voxtral_realtime import model as vox
        from executorch.examples.models.voxtral_realtime.export_voxtral_rt import (
            TextDecoderExport, TokenEmbeddingExport)
        super().__init__()
        cfg = vox.VoxtralRealtimeConfig(
            dim=DIM, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, hidden_dim=64,
            vocab_size=VOCAB, ada_rms_norm_t_cond_dim=8, enc_dim=32, enc_n_layers=2,
            enc_n_heads=4, enc_head_dim=8, enc_hidden_dim=64, num_mel_bins=MELS,
            downsample_factor=4, max_seq_len=MAX_SEQ, sliding_window=DEC_WINDOW, streaming=True,
            backend=backend)
        model = vox.VoxtralRealtimeModel(cfg).eval()
        model.register_buffer("t_cond", vox.compute_time_embedding(6, DIM))   # as load_model
        self.encode_audio_chunk = vox.StreamingAudioEncoderExport(model, max_enc_len=ENC_WINDOW)
        self.text_decoder = TextDecoderExport(model)
        self.token_embedding = TokenEmbeddingExport(model)


class _Method(torch.nn.Module):
    """Method `name` of the program as the module torch.export takes."""

    def __init__(self, program: _Program, name: str):
        super().__init__()
        self.program, self.name = program, name

    def forward(self, x, pos=None):
        method = getattr(self.program, self.name)
        return method(x) if pos is None else method(x, pos)


def voxtral_methods(path: str = "reference", backend: str = "cuda"):
    """(ModelMethods, eager): eager's methods are `getattr(eager.program, name)`."""
    from method_check import ModelMethods
    torch.manual_seed(0)
    program = _Program(backend).eval()
    modules = {n: _Method(program, n) for n in NAMES}
    eager = copy.deepcopy(_Method(program, NAMES[0]))
    t, ids = torch.export.Dim("seq_len", min=1, max=MAX_SEQ), torch.export.Dim("tok_seq_len",
                                                                                 min=1, max=MAX_SEQ)
    args = {"encode_audio_chunk": (torch.randn(1, MELS, 8), torch.arange(4)),
            "text_decoder": (torch.randn(1, 4, DIM), torch.arange(4)),
            "token_embedding": (torch.tensor([[0, 1, 2, 3]]),)}
    dims = {"text_decoder": {"x": {1: t}, "pos": {0: t}}, "token_embedding": {"x": {1: ids}}}
    eps = {n: None if path == "recipe" else torch.export.export(
        modules[n], args[n], dynamic_shapes=dims.get(n), strict=True) for n in NAMES}
    return ModelMethods(eps, args, {}, dims, modules, path, strict=True), eager


def voxtral_call(eager: torch.nn.Module, name: str, args: tuple):
    return getattr(eager.program, name)(*args)


def voxtral_calls(seed: int = 1) -> list[tuple[str, tuple]]:
    g = torch.Generator().manual_seed(seed)
    calls: list[tuple[str, tuple]] = []

    def session(text_lengths):
        enc = dec = 0
        for n in text_lengths:
            calls.append(("encode_audio_chunk", (torch.randn(1, MELS, 8, generator=g),
                                                 torch.arange(enc, enc + 4))))
            calls.append(("token_embedding", (torch.randint(0, VOCAB, (1, n), generator=g),)))
            calls.append(("text_decoder", (torch.randn(1, n, DIM, generator=g),
                                           torch.arange(dec, dec + n))))
            enc, dec = enc + 4, dec + n

    session([6, 1, 4, 1, 4, 3])     # 24 encoder positions (window 4: ring of 8), 19 decoder (16)
    session([2, 1])                 # the encoder restarts at 0: its conv states reset in-graph
    calls.append(("reset", ()))
    session([3, 1])
    return calls


__all__ = ["NAMES", "voxtral_call", "voxtral_calls", "voxtral_methods"]
