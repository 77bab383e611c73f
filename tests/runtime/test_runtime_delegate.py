"""The C++ runtime inside ExecuTorch's Python runtime: .pte files whose delegate is
"TensorRTBackend" (reference payload, TR03 blob) update the caller's state exactly like eager,
with the aliased KV write costing no copy and each copy-back exactly one buffer-sized copy."""

import pytest
import torch

import runtime_helpers as H
from helpers import FIXTURES
from torch_tensorrt_ext import runtime_lib



def method_of(runtime, pte: bytes):
    """(program, forward): the caller keeps the program alive — a Method does not (the Python
    Program owns the .pte bytes the method and its delegates point into)."""
    program = runtime.load_program(pte)
    return program, program.load_method("forward")


def test_kv_cache_aliased_in_place_and_step_copied_back(runtime, kv_pte):
    _program, forward = method_of(runtime, kv_pte)
    g = torch.Generator().manual_seed(0)
    cache = torch.zeros(1, 2, 6, 8)
    step = torch.zeros(1, dtype=torch.int64)
    cache_ptr, step_ptr = cache.data_ptr(), step.data_ptr()
    ref_cache, ref_step = cache.clone(), step.clone()
    runtime_lib.reset_counters()
    for n, p in enumerate([0, 1, 2, 5, 3, 2], start=1):
        tok = torch.randn(1, 2, 1, 8, generator=g)
        pos = torch.tensor([p])
        (logits,) = forward.execute([tok, pos, cache, step])
        ref_cache.index_copy_(2, pos, tok)  # eager semantics of the stateful model
        ref_logits = ref_cache.sum(dim=2) + ref_step
        ref_step += 1
        torch.testing.assert_close(logits, ref_logits)
        assert torch.equal(cache, ref_cache) and torch.equal(step, ref_step)
        assert (cache.data_ptr(), step.data_ptr()) == (cache_ptr, step_ptr)
        # KV: written in place through the caller's cache, no copy; step: one 8-byte copy
        assert runtime_lib.copy_bytes("layers.0.attn.k_cache") == 0
        assert runtime_lib.copy_bytes("step") == 8 * n
        assert runtime_lib.execute_count() == n


def test_ring_buffer_copy_back_is_one_buffer_sized_copy_per_call(runtime):
    spec = H.ring_spec()
    pte = H.delegated_pte(H.RingOuter(), dict(spec.inputs), spec)
    _program, forward = method_of(runtime, pte)
    ring = torch.zeros(4, 3)
    ref = ring.clone()
    runtime_lib.reset_counters()
    for n in range(1, 6):
        x = torch.full((3,), float(n)) * torch.tensor([1.0, 10.0, 100.0])
        (y,) = forward.execute([x, ring])
        ref_y = ref.sum(dim=0) + x
        ref = torch.cat([ref[1:], x.unsqueeze(0)])
        torch.testing.assert_close(y, ref_y)
        assert torch.equal(ring, ref)
        assert runtime_lib.copy_bytes("ring.buf") == ring.nbytes * n == 48 * n
    assert runtime_lib.execute_count() == 5


def test_upstream_tensorrt_blob_is_refused_at_load_with_reason(runtime, capfd):
    class UpstreamTR01(H.EngineSpec):
        def blob(self, delegate_inputs):
            return (FIXTURES / "upstream_tr01.blob").read_bytes()

    class AddOne(torch.nn.Module):
        def forward(self, x):
            return x + 1

    spec = UpstreamTR01(module=AddOne(), inputs={"x": torch.zeros(1, 4)}, outputs=["y"],
                        delegate_outputs=["y"])
    pte = H.delegated_pte(AddOne(), {"x": torch.zeros(1, 4)}, spec)
    capfd.readouterr()
    with pytest.raises(RuntimeError, match="Failed to load method forward"):
        method_of(runtime, pte)
    err = capfd.readouterr().err
    assert ("TensorRTBackend: init refused the delegate blob: TR01 blob holds a TensorRT engine, "
            "but this runtime was built without TensorRT (engines: reference)") in err
    assert runtime_lib.last_check() == "engine.not_compiled"


def test_a_payload_returning_one_value_as_two_outputs_fills_both(runtime):
    """A partition handing one tensor to two consumers returns it as two outputs (seen in
    Qwen3.5's Gated DeltaNet layer, whose recurrent state went out three times): ExecuTorch gives
    the payload's outputs one tensor, so binding each output would leave all but the last bound
    address unwritten — the runtime fills the others from it."""
    class Twice(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            return y, y

    class TwiceOuter(torch.nn.Module):
        def forward(self, x):
            return x.neg(), x.abs()

    spec = H.EngineSpec(module=Twice(), inputs={"x": torch.zeros(2, 3)}, outputs=["a", "b"],
                        delegate_outputs=["a", "b"])
    _program, forward = method_of(runtime, H.delegated_pte(TwiceOuter(), dict(spec.inputs), spec))
    for n in range(1, 4):
        x = torch.arange(6.0).reshape(2, 3) + n
        a, b = forward.execute([x])
        assert torch.equal(a, x * 2) and torch.equal(b, x * 2), (n, a, b)
