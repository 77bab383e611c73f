"""Models with a runtime sequence length (issue 19): the prefill a model author exports with a
dynamic prompt length, and the helpers every dynamic-shape test shares."""
from __future__ import annotations

import torch

MAX_T = 16


class PrefillCache(torch.nn.Module):
    """A KV-cache layer written at T runtime positions (`index_copy_` along the sequence, as
    ExecuTorch's llama cache does) and read whole: prefill with T = prompt length, decode with
    T = 1."""

    def __init__(self, width: int = 8, max_t: int = MAX_T):
        super().__init__()
        self.proj = torch.nn.Linear(width, width)
        self.register_buffer("k_cache", torch.zeros(1, max_t, width))

    def forward(self, x, pos):
        k = self.proj(x)
        self.k_cache.index_copy_(1, pos, k)
        return self.k_cache.sum(1, keepdim=True) * k


def prefill_dims():
    t = torch.export.Dim("T", min=1, max=MAX_T)
    return {"x": {1: t}, "pos": {0: t}}


def prefill_args(t: int, start: int = 0, width: int = 8, generator=None):
    return torch.randn(1, t, width, generator=generator), torch.arange(start, start + t)


def prefill_input_specs(torch_tensorrt, width: int = 8):
    """The same bounds as `torch_tensorrt.Input` specs (upstream's documented way): one named
    dimension shared by both inputs."""
    return [torch_tensorrt.Input(min_shape=(1, 1, width), opt_shape=(1, 4, width),
                                 max_shape=(1, MAX_T, width), dtype=torch.float32,
                                 shared_dims={1: "T"}),
            torch_tensorrt.Input(min_shape=(1,), opt_shape=(4,), max_shape=(MAX_T,),
                                 dtype=torch.int64, shared_dims={0: "T"})]


class PrefillDecodeEncode(PrefillCache):
    """An LLM beside a VLM's vision encoder: the cache layer with a token counter (prefill and
    decode are its forward) and a stateless `encode`, called between decode steps."""

    def __init__(self, width: int = 8, max_t: int = MAX_T):
        super().__init__(width, max_t)
        self.enc = torch.nn.Linear(width, width)
        self.register_buffer("seen", torch.zeros(1, dtype=torch.int64))

    def forward(self, x, pos):
        self.seen.add_(x.shape[1])
        return super().forward(x, pos) + self.seen

    def encode(self, x):
        return torch.relu(self.enc(x)) * 3 + 1


class CrossDecoder(torch.nn.Module):
    """Whisper's shape: `fill` writes the cross-attention state from the encoder's output once per
    utterance; `forward` (the decode step) writes its own cache at `pos` and only reads it."""

    def __init__(self, width: int = 8, max_t: int = MAX_T):
        super().__init__()
        self.enc = torch.nn.Linear(width, width)
        self.proj = torch.nn.Linear(width, width)
        self.register_buffer("cross", torch.zeros(1, width))
        self.register_buffer("k_cache", torch.zeros(1, max_t, width))

    def fill(self, audio):
        self.cross.copy_(self.enc(audio))
        return self.cross * 2

    def forward(self, x, pos):
        self.k_cache.index_copy_(1, pos, self.proj(x))
        return self.k_cache.sum(1, keepdim=True) * self.cross
