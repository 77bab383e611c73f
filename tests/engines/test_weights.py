"""`engines.weights`: which constants of a partition become named-data weights, and the packed
payload the compiled module holds (CONTRACTS.md §2 "Weights")."""
from __future__ import annotations

import hashlib

import torch
from torch.fx import GraphModule, Graph

from torch_tensorrt_ext.engines.weights import (KEY_PREFIX, MIN_WEIGHT_BYTES, WEIGHT_ALIGNMENT,
                                                pack, unpack, weights_as_inputs)


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


def test_pack_and_unpack_find_every_part_as_views():
    gm, consts = _partition()
    weights = weights_as_inputs(gm)
    program = b"PROGRAM" * 5
    payload = pack(program, weights)
    got_program, got = unpack(payload, [r for r, _ in weights])
    assert bytes(got_program.numpy()) == program
    for (_, t), w in zip(weights, got, strict=True):
        assert torch.equal(w, t) and w.dtype == t.dtype
        assert w.untyped_storage().data_ptr() == payload.untyped_storage().data_ptr()
        assert (w.data_ptr() - payload.data_ptr()) % WEIGHT_ALIGNMENT == 0
