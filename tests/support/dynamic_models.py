"""Models with a runtime sequence length: the prefill a model author exports with a
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


# --- the forms users write a length-T write in -------------------------------------------------

class CondPrefill(PrefillCache):
    """`PrefillCache` whose new rows come out of a `torch.cond` (its branches kept as graph
    modules of their own by torch.export)."""

    def forward(self, x, pos):
        k = self.proj(x)
        k = torch.cond(k.sum() > 0, lambda v: v * 2, lambda v: v - 1, (k,))
        self.k_cache.index_copy_(1, pos, k)
        return self.k_cache.sum(1, keepdim=True) * k


class ScatterPrefill(torch.nn.Module):
    """An accumulator written at T runtime positions by one of the scatter / index ops the
    converters take (`op`), read whole."""

    OPS = ("scatter_add", "scatter_add_functional", "scatter_reduce_sum", "scatter", "index_add",
           "index_copy", "index_put_accumulate", "index_fill")

    def __init__(self, op: str = "scatter_add", width: int = 8, max_t: int = MAX_T):
        super().__init__()
        self.op = op
        self.proj = torch.nn.Linear(width, width)
        self.register_buffer("acc", torch.ones(1, max_t, width))

    def forward(self, x, pos):
        k, acc = self.proj(x), self.acc
        rows = pos.view(1, -1, 1).expand(1, pos.shape[0], k.shape[-1])
        if self.op == "scatter_add":
            acc.scatter_add_(1, rows, k)
        elif self.op == "scatter_add_functional":
            acc.copy_(torch.scatter_add(acc, 1, rows, k))
        elif self.op == "scatter_reduce_sum":
            acc.scatter_reduce_(1, rows, k, "sum")
        elif self.op == "scatter":
            acc.scatter_(1, rows, k)
        elif self.op == "index_add":
            acc.index_add_(1, pos, k)
        elif self.op == "index_copy":
            acc.index_copy_(1, pos, k)
        elif self.op == "index_put_accumulate":
            acc.index_put_((torch.zeros_like(pos), pos), k[0], accumulate=True)
        else:
            acc.index_fill_(1, pos, 0.5)
        return acc.sum(1, keepdim=True) * k


class StartWrite(torch.nn.Module):
    """A `[1, 2, 2 * MAX_T, 8]` cache written at T positions from a start read with `.item()`
    (the bounds torch.export needs checked where the model reads it), by `narrow(...).copy_` or a
    slice assignment (`form`). (Twice the length's bound: a write of the whole cache would be
    one more case torch.export guards on.)"""

    def __init__(self, form: str = "narrow", width: int = 8, max_t: int = 2 * MAX_T):
        super().__init__()
        self.form, self.max_t = form, max_t
        self.proj = torch.nn.Linear(width, width)
        self.register_buffer("k_cache", torch.zeros(1, 2, max_t, width))

    def forward(self, x, pos):
        t = x.shape[1]
        k = self.proj(x).unsqueeze(1).expand(1, 2, t, x.shape[-1])
        p = pos[0].item()
        torch._check(p >= 0)
        torch._check(p + t <= self.max_t)
        if self.form == "narrow":
            self.k_cache.narrow(2, p, t).copy_(k)
        else:
            self.k_cache[:, :, p:p + t] = k
        return self.k_cache.sum(2)[:, :1] * k[:, 0]


FORMS = {"cond": CondPrefill, "scatter_add": ScatterPrefill,
         "start_narrow": lambda: StartWrite("narrow"), "start_slice": lambda: StartWrite("slice")}
