"""`lowering.rewrites`: the same-value rewrites as one ordered list, each a pure `find` and an
`apply` of what it found, made by `rewritten` on one copy of the caller's program — taken at the
first rewrite that finds anything, never when none does; each rewrite finds on the program as
the ones before it left it."""
from __future__ import annotations

import torch
from torch import nn

from torch_tensorrt_ext.lowering import rewrites
from torch_tensorrt_ext.lowering.copy_sources import shared_copy_sources
from torch_tensorrt_ext.lowering.rewrites import SAME_VALUE, rewritten
from torch_tensorrt_ext.lowering.subgraphs import graphs

D = 8


class _LastRowAndFill(nn.Module):
    """A write to `buf[-1]` (negative_indices) and a 0-d `fill_` (broadcast_writes)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("ema", torch.zeros(4, D))
        self.register_buffer("f", torch.zeros(2, D))

    def forward(self, x):
        self.ema[-1].add_(x.mean(0))
        self.f.fill_(x.mean())
        return self.ema.sum(0) + self.f.sum(0)


class _OneInputTwoBuffers(nn.Module):
    """`h` copied into a wider buffer (broadcast) and into one of its own shape: two writes
    ending on one input, until the broadcast gives the first a value of its own."""

    def __init__(self):
        super().__init__()
        self.register_buffer("a", torch.zeros(4, D))
        self.register_buffer("b", torch.zeros(1, D))

    def forward(self, h):
        self.a.copy_(h)
        self.b.copy_(h)
        return self.a.sum(0) + self.b[0]


def _codes(ep) -> list[str]:
    return [g.code for g in graphs(ep.graph_module)]


def _counting_copies(monkeypatch) -> list[int]:
    made = []
    real = rewrites.copied

    def counted(gm):
        made.append(1)
        return real(gm)
    monkeypatch.setattr(rewrites, "copied", counted)
    return made


def test_two_rewrites_apply_on_one_copy_and_the_callers_program_is_left_as_it_was(monkeypatch):
    x = torch.randn(3, D)
    ep = torch.export.export(_LastRowAndFill(), (x,))
    before = _codes(ep)
    made = _counting_copies(monkeypatch)
    result = rewritten(ep)
    assert result.counts == {"negative_indices": 1, "broadcast_writes": 1}
    assert len(made) == 1
    assert result.program is not ep and _codes(ep) == before
    assert _codes(result.program) != before
    assert all(r.find(result.program) == () for r in SAME_VALUE)   # nothing left to rewrite
    want = _LastRowAndFill()
    got = result.program.module()
    torch.testing.assert_close(got(x), want(x))
    torch.testing.assert_close(got.ema, want.ema)
    torch.testing.assert_close(got.f, want.f)


def test_nothing_to_rewrite_is_the_same_program_and_no_copy(monkeypatch):
    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.zeros(1, D))

        def forward(self, h):
            self.b.add_(h)
            return self.b * 2
    ep = torch.export.export(Plain(), (torch.randn(1, D),))
    made = _counting_copies(monkeypatch)
    result = rewritten(ep)
    assert result.program is ep and result.counts == {} and made == []


def test_a_later_rewrite_finds_on_the_program_the_earlier_ones_left(monkeypatch):
    """On the exported graph `b.copy_(h)` shares its source with `a.copy_(h)` (copy_sources
    finds it); after broadcast_writes, `a` copies `expand(h)` and `h` is `b`'s alone: the list
    makes one rewrite, not two (a dry run over the original graph counted both)."""
    h = torch.randn(1, D)
    ep = torch.export.export(_OneInputTwoBuffers(), (h,))
    assert len(shared_copy_sources(ep)) == 1
    made = _counting_copies(monkeypatch)
    result = rewritten(ep)
    assert result.counts == {"broadcast_writes": 1} and len(made) == 1
    assert shared_copy_sources(result.program) == ()
    functional = result.program.run_decompositions({})   # both writes are the program's own
    assert set(functional.graph_signature.buffers_to_mutate.values()) == {"a", "b"}
    got, want = result.program.module(), _OneInputTwoBuffers()
    for step in range(2):
        h = torch.randn(1, D, generator=torch.Generator().manual_seed(step))
        torch.testing.assert_close(got(h), want(h))
        torch.testing.assert_close(got.a, want.a)
        torch.testing.assert_close(got.b, want.b)


def test_an_owned_program_is_rewritten_in_place(monkeypatch):
    ep = torch.export.export(_LastRowAndFill(), (torch.randn(3, D),))
    made = _counting_copies(monkeypatch)
    result = rewritten(ep, owned=True)
    assert result.program is ep and made == [] and len(result.counts) == 2
