"""`engines.weights`: which constants of a partition become named-data weights, and the tensors
the compiled module holds for them (CONTRACTS.md §2 "Weights")."""
from __future__ import annotations

import gc
import hashlib
import weakref

import pytest
import torch
from torch.fx import GraphModule, Graph

from torch_tensorrt_ext.contracts.tensor_bytes import tensor_bytes
from torch_tensorrt_ext.engines.weights import (KEY_PREFIX, MIN_WEIGHT_BYTES, held, mismatch,
                                                weight_key, weights_as_inputs)


def _partition() -> tuple[GraphModule, dict[str, torch.Tensor]]:
    """x + big + big_again(same bytes, another tensor) + shared(read twice) + small + rotary."""
    root = torch.nn.Module()
    consts = {"big": torch.randn(8, 16), "twin": None, "shared": torch.randn(8, 16),
              "small": torch.randn(16), "rot": torch.randn(8, 16, dtype=torch.complex64)}
    consts["twin"] = consts["big"].clone()
    for name, t in consts.items():
        root.register_buffer(name, t)
    g = Graph()
    x = g.placeholder("x")
    acc = x
    for name in ("big", "twin", "shared", "shared", "small"):
        acc = g.call_function(torch.add, (acc, g.get_attr(name)))
    rot = g.call_function(torch.real, (g.get_attr("rot"),))
    g.output((acc, rot))
    return GraphModule(root, g), consts


def test_large_constants_become_trailing_inputs_one_per_value():
    gm, consts = _partition()
    weights = weights_as_inputs(gm)
    phs = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    assert phs == ["x", "tte_weight_0", "tte_weight_1"]          # big (= twin), shared
    refs = [r for r, _ in weights]
    assert [r.key for r in refs] == [
        KEY_PREFIX + hashlib.sha256(consts[n].numpy().tobytes()).hexdigest()
        for n in ("big", "shared")]
    assert [(r.dtype, r.shape) for r in refs] == [("float32", (8, 16))] * 2
    kept = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    assert kept == {"small", "rot"}          # under MIN_WEIGHT_BYTES; a dtype no binding takes
    assert consts["small"].nbytes < MIN_WEIGHT_BYTES
    assert not hasattr(gm, "big") and not hasattr(gm, "shared")   # an export lifts no orphan
    x = torch.randn(8, 16)
    got, rot = gm(x, *[t for _, t in weights])
    c = consts
    torch.testing.assert_close(got, x + c["big"] + c["twin"] + 2 * c["shared"] + c["small"])
    torch.testing.assert_close(rot, torch.real(c["rot"]))


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def test_engines_hold_one_snapshot_of_each_weight_through_views_of_their_own():
    gm, consts = _partition()
    weights = weights_as_inputs(gm)
    # a second engine (another method) with the same bytes in tensors of its own
    first, second = held(weights), held([(r, t.clone()) for r, t in weights])
    for (_, t), a, b in zip(weights, first, second, strict=True):
        assert torch.equal(a, t) and a.dtype == t.dtype and a.is_contiguous()
        assert _storage(a) != _storage(t)                  # a snapshot, not the model's tensor
        assert a is not b and _storage(a) == _storage(b)   # one snapshot, a view each
    assert _storage(first[0]) != _storage(first[1])        # two weights: two snapshots
    before = consts["big"].clone()
    consts["big"].add_(1)                                  # the model's later write
    assert torch.equal(first[0], before)                   # never reaches an engine


def test_a_snapshot_lives_while_an_engine_holds_it():
    gm, _ = _partition()
    weights = weights_as_inputs(gm)
    views = held(weights)
    assert _storage(held(weights)[0]) == _storage(views[0])
    snapshot = weakref.ref(views[0]._base)
    del views
    gc.collect()
    assert snapshot() is None                 # no engine holds it: freed, not kept by the table
    again = held(weights)                     # and taken afresh
    assert torch.equal(again[0], weights[0][1]) and again[0]._base is not None


# --- every layout and dtype ---------------------------------------------------------------------
# A constant whose last dimension has size 1 at another stride (a Linear(64, 1)'s weight stored
# transposed by `linear_weights`, Qwen3.5-MoE's shared-expert gate) was refused at compile:
# "self.stride(-1) must be 1 to view Float as Byte ... but got 64" (`.contiguous()` keeps it).
N = 256          # elements: every dtype's constant is at least MIN_WEIGHT_BYTES


def _values(shape, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(31 * len(shape) + sum(shape))
    v = torch.randn(shape, generator=g) * 10
    return v > 0 if dtype == torch.bool else v.to(dtype)


LAYOUTS = {   # name -> dtype -> a tensor of that layout
    "contiguous": lambda d: _values((16, N // 16), d),
    "size1_last_strided": lambda d: _values((1, N), d).t(),                   # [N, 1] (1, N)
    "size1_middle_strided": lambda d: _values((N // 2, 2), d).as_strided((N // 2, 1, 2),
                                                                          (2, 999, 1)),
    "size1_only": lambda d: _values((1, N), d).t()[:1],                       # [1, 1] (1, N)
    "transposed": lambda d: _values((N // 16, 16), d).t(),
    "expanded": lambda d: _values((1, N // 16), d).expand(16, N // 16),        # stride 0
    "sliced_step": lambda d: _values((16, N // 8), d)[:, ::2],
    "sliced_offset": lambda d: _values((20, N // 16), d)[3:19],
    "zero_d": lambda d: _values((), d),
    "empty": lambda d: _values((0, 16), d),
}
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64,
          torch.bool, torch.uint8)


def _row_major_bytes(t: torch.Tensor) -> bytes:
    """`t`'s values written row-major by a route that shares nothing with `tensor_bytes`."""
    fresh = torch.tensor(t.tolist(), dtype=t.dtype).reshape(-1)
    return fresh.view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_and_dtype_is_its_values_row_major(layout, dtype):
    t = LAYOUTS[layout](dtype)
    want = _row_major_bytes(t)
    assert len(want) == t.numel() * t.element_size()
    assert bytes(tensor_bytes(t)) == want
    assert weight_key(t) == KEY_PREFIX + hashlib.sha256(want).hexdigest()
    if t.nbytes < MIN_WEIGHT_BYTES:
        return
    root = torch.nn.Module()
    root.register_buffer("w", t)
    g = Graph()
    x = g.placeholder("x")
    g.output((g.call_function(torch.mul, (g.get_attr("w"), x)),))
    gm = GraphModule(root, g)
    weights = weights_as_inputs(gm)
    [(ref, _)] = weights
    assert (ref.key, ref.shape, ref.nbytes) == (weight_key(t), tuple(t.shape), len(want))
    [kept] = held(weights)
    assert torch.equal(kept, t) and kept.is_contiguous()
    assert kept.reshape(-1).view(torch.uint8).numpy().tobytes() == want
    one = torch.ones((), dtype=dtype)
    assert torch.equal(gm(one, kept)[0], t * one)


def test_keys_identify_the_bytes_not_the_layout():
    t = _values((1, N), torch.float32).t()                     # [N, 1] at stride N
    same = t.contiguous().clone(memory_format=torch.contiguous_format)
    other = same.clone()
    other[7, 0] += 1
    assert weight_key(t) == weight_key(same) == weight_key(same.view(-1))
    assert weight_key(other) != weight_key(t)
    wide = _values((1, N // 16), torch.bfloat16)
    assert weight_key(wide.expand(16, N // 16)) == weight_key(wide.repeat(16, 1))
    assert weight_key(_values((16, 16), torch.int8).t()) != weight_key(_values((16, 16),
                                                                               torch.int8))


class _OddWeights(torch.nn.Module):
    """A Linear(64, 1) — stored transposed by `linear_weights`: a [64, 1] weight at stride 64, the
    constant Qwen3.5-MoE's shared-expert gate made — a small one kept in the program, a
    transposed parameter, an expanded buffer, and a counter (state)."""

    def __init__(self):
        super().__init__()
        self.gate = torch.nn.Linear(64, 1, bias=False)
        self.small = torch.nn.Linear(8, 1)
        self.tr = torch.nn.Parameter(torch.randn(16, 64).t())
        self.register_buffer("wide", torch.randn(1, 16).expand(64, 16))
        self.register_buffer("n", torch.zeros(1))

    def forward(self, x):
        self.n.add_(1)
        gated = torch.sigmoid(self.gate(x)) * x + self.small(x[:, :8])
        return (gated @ self.tr + gated @ self.wide) * self.n


def test_a_model_of_odd_weight_layouts_compiles_saves_and_steps_like_eager():
    from stateful_check import ModuleProgram, check_program
    program = ModuleProgram(_OddWeights, lambda s: (
        torch.randn(2, 64, generator=torch.Generator().manual_seed(s)),), ("n",))
    result = check_program(program, steps=3)
    assert result.ok, result.report(program)


def test_a_mismatch_names_the_engine_and_what_differs():
    gm, _ = _partition()
    weights = weights_as_inputs(gm)
    refs, tensors = [r for r, _ in weights], held(weights)
    assert mismatch("e", refs, tensors) is None
    assert mismatch("e", refs, tensors[:1]) == "engine 'e' is handed 1 weights for the 2 it holds"
    bad = [tensors[0], tensors[1].to(torch.float16)]
    assert mismatch("e", refs, bad) == (f"engine 'e', weight {refs[1].key}: it is handed a "
                                        "float16 [8, 16] tensor for its float32 [8, 16] weight")
