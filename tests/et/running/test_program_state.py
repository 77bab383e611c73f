"""State control on a loaded `.pte` (`tte.executorch.load`): `reset()` starts a new sequence
without reloading, `state()` / `load_state()` snapshot and restore a conversation, by FQN. Run
with host arenas here, and with every buffer in emulated device memory by test_emulated_device."""
from __future__ import annotations

import copy

import pytest
import torch

import torch_tensorrt_ext as tte
from torch_tensorrt_ext import reference
from torch_tensorrt_ext.demo.models import Decoder

pytestmark = pytest.mark.emulated_device

STEPS = 5


def _args(s):
    g = torch.Generator().manual_seed(100 + s)
    return torch.randn(1, 1, 16, generator=g), torch.tensor([s])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The demo decoder (KV caches, a conv ring buffer, a step counter) with random initial
    buffer values, saved once; and its eager model."""
    torch.manual_seed(3)
    model = Decoder(layers=2).eval()
    for b in model.buffers():
        if b.is_floating_point():
            b.normal_()
    path = tmp_path_factory.mktemp("state") / "decoder.pte"
    reference.export(copy.deepcopy(model), _args(0), path)
    return model, path


def _steps(prog, start, n):
    return [prog.run(*_args(s))[0] for s in range(start, start + n)]


def test_reset_starts_over_like_a_fresh_load(saved):
    model, path = saved
    fresh = tte.executorch.load(path)
    want_state = fresh.state()
    want = _steps(fresh, 0, STEPS)
    prog = tte.executorch.load(path)
    _steps(prog, 0, STEPS)
    assert any(not torch.equal(prog.state()[f], want_state[f]) for f in want_state)
    prog.reset()
    for fqn, t in prog.state().items():
        torch.testing.assert_close(t, want_state[fqn], rtol=0, atol=0, msg=fqn)
    for got, w in zip(_steps(prog, 0, STEPS), want, strict=False):
        torch.testing.assert_close(got, w, rtol=0, atol=0)
    eager = copy.deepcopy(model)   # and the sequence is eager's own
    for s, got in enumerate(want):
        with torch.no_grad():
            torch.testing.assert_close(got, eager(*_args(s)))


def test_state_is_every_buffer_by_fqn_with_its_initial_value(saved):
    model, path = saved
    state = tte.executorch.load(path).state()
    assert sorted(state) == sorted(n for n, _ in model.named_buffers())
    for fqn, t in state.items():
        torch.testing.assert_close(t, model.get_buffer(fqn), rtol=0, atol=0, msg=fqn)


def test_a_snapshot_restored_replays_the_conversation_from_there(saved):
    _, path = saved
    prog = tte.executorch.load(path)
    _steps(prog, 0, 2)
    snapshot = prog.state()
    want = _steps(prog, 2, 3)
    prog.load_state(snapshot)
    for got, w in zip(_steps(prog, 2, 3), want, strict=False):
        torch.testing.assert_close(got, w, rtol=0, atol=0)
    other = tte.executorch.load(path)   # into another program: the same continuation
    other.load_state(snapshot)
    for got, w in zip(_steps(other, 2, 3), want, strict=False):
        torch.testing.assert_close(got, w, rtol=0, atol=0)


def test_load_state_refuses_what_does_not_fit_and_writes_nothing(saved):
    _, path = saved
    prog = tte.executorch.load(path)
    before = prog.state()
    k = "layers.0.attn.k_cache"
    with pytest.raises(KeyError, match=r"has no mutable buffer 'nope'; it has \["):
        prog.load_state({k: torch.zeros_like(before[k]), "nope": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"buffer 'step' is torch.int64 \[1\]; the value given "
                                         r"is torch.float32 \[1\]"):
        prog.load_state({k: torch.zeros_like(before[k]), "step": torch.zeros(1)})
    for fqn, t in prog.state().items():
        torch.testing.assert_close(t, before[fqn], rtol=0, atol=0, msg=fqn)


def test_upstreams_program_interface(saved):
    """`forward(*inputs)` and `run(inputs, method)` as torch-tensorrt documents them."""
    _, path = saved
    a, b = tte.executorch.load(path), tte.executorch.load(path)
    assert a.method_names == {"forward"}
    torch.testing.assert_close(a.forward(*_args(0))[0], b.run(list(_args(0)), "forward")[0],
                               rtol=0, atol=0)


def test_the_state_lives_where_the_program_placed_it(saved):
    """On the host here; in emulated device memory when test_emulated_device runs this file
    ($TTE_REFERENCE_DEVICE=cuda:0): then every read above went through the device's copies."""
    import os

    from executorch.exir import schema
    from executorch.exir._serialize._program import deserialize_pte_binary

    from torch_tensorrt_ext.executorch.inspecting.traffic import mutable_buffers
    _, path = saved
    plan = deserialize_pte_binary(path.read_bytes()).program.execution_plan[0]
    want = (schema.DeviceType.CUDA if os.environ.get("TTE_REFERENCE_DEVICE", "cpu") != "cpu"
            else schema.DeviceType.CPU)
    placed = {f: t.extra_tensor_info.device_type for f, (_, t) in mutable_buffers(plan).items()}
    assert placed and set(placed.values()) == {want}, placed


def test_torch_tensorrt_load_runs_the_pte_like_eager(saved):
    """Upstream's documented loader, after `patch apply`: this project's program, same loader."""
    torch_tensorrt = pytest.importorskip("torch_tensorrt")
    model, path = saved
    prog = torch_tensorrt.load(str(path), format="executorch")
    from torch_tensorrt_ext.executorch.running.program import Program
    assert isinstance(prog, Program) and prog.method_names == {"forward"}
    eager = copy.deepcopy(model)
    for s in range(STEPS):
        with torch.no_grad():
            torch.testing.assert_close(prog.forward(*_args(s))[0], eager(*_args(s)))
    assert prog.state_traffic()["layers.0.attn.k_cache"] == 0


def test_traffic_by_path_kv_moves_nothing_and_each_copy_back_is_one_copy_where_the_state_is(saved):
    """Per call: KV caches 0 bytes; each copy-back buffer (the delegate copies the engine's new
    value into it) exactly its size, as one copy within the memory it lives in — device memory
    when the program placed the state there (emulated here under test_emulated_device), host
    memory otherwise; nothing crosses the host-device link."""
    import os
    model, path = saved
    prog = tte.executorch.load(path)
    _steps(prog, 0, STEPS)
    on_device = os.environ.get("TTE_REFERENCE_DEVICE", "cpu") != "cpu"
    by_path = prog.state_traffic_by_path()
    assert {f: sum(p.values()) for f, p in by_path.items()} == prog.state_traffic()
    for fqn, paths in by_path.items():
        b = model.get_buffer(fqn)
        size = 0 if "attn" in fqn else b.numel() * b.element_size()   # the caches are KV
        want = {"device": size if on_device else 0, "link": 0, "host": 0 if on_device else size}
        assert paths == want, (fqn, paths)


def test_a_host_placed_program_keeps_its_copies_on_the_host(tmp_path, saved):
    """Placement is the program's: saved for the host, its delegates run on the host and copy
    there even when a device is in force (under test_emulated_device) — no round trip through
    device memory."""
    from torch_tensorrt_ext.executorch.saving import lower
    model, _ = saved
    ep, compiled = reference.export_program(copy.deepcopy(model), _args(0))
    path = tmp_path / "host.pte"
    path.write_bytes(bytes(lower.to_executorch(ep, device="cpu").buffer))
    prog = tte.executorch.load(path)
    _steps(prog, 0, 2)
    for w in compiled.plan:
        b = model.get_buffer(w.fqn)
        size = 0 if w.is_kv else b.numel() * b.element_size()
        assert prog.state_traffic_by_path()[w.fqn] == {"device": 0, "link": 0, "host": size}, \
            w.fqn
