"""Hostile and corrupt delegate blobs inside real .pte files:

- integrity: every byte of a delegate blob flipped in turn — each load + run either raises or
  returns exactly (bit for bit) the intact program's answer, which is the eager answer (to the
  float summation order), and the only flips that run are of bytes no reader reads
  (the header's reserved bytes, the padding before the payload);
- a flipped payload byte with the blob resealed (a hostile payload with valid digests) loaded
  through `tte.executorch.load` raises or runs — never kills the process;
- the refusal reason and the delegate it concerns are in the Python exception.
"""
import struct

import pytest
import torch

import runtime_helpers as H
import torch_tensorrt_ext as tte
from torch_tensorrt_ext.engines import kv_op
from torch_tensorrt_ext.contracts import blob as B
from torch_tensorrt_ext import runtime_lib

def call_inputs():
    g = torch.Generator().manual_seed(3)
    return [torch.randn(1, 2, 1, 8, generator=g), torch.tensor([4]),
            torch.randn(1, 2, 6, 8, generator=g), torch.tensor([7])]


def eager_answer():
    """logits, the cache and the step after one call, as the eager stateful model has them."""
    tok, pos, cache, step = call_inputs()
    new = kv_op.kv_cache_update(cache, 2, pos, tok)
    return new.sum(dim=2) + step, new, step + 1


def run_once(runtime, pte: bytes):
    program = runtime.load_program(pte)
    args = call_inputs()
    (logits,) = program.load_method("forward").execute(args)
    return logits, args[2], args[3]


def never_read(blob: bytes):
    """Offsets (in the blob) of the bytes no reader reads: reserved header bytes, padding."""
    _, md_off, md_size, eng_off, _, _ = struct.unpack(B.HEADER_FORMAT, blob[:32])
    return set(range(24, 32)) | set(range(md_off + md_size, eng_off))


def test_every_flipped_blob_byte_raises_or_gives_the_eager_answer(runtime, kv_pte):
    where = H.blob_in_pte(kv_pte)
    blob = kv_pte[where]
    want = run_once(runtime, kv_pte)  # the intact program: a flip must not change one bit of it
    for got, eager in zip(want, eager_answer(), strict=False):  # and it is the eager answer
        torch.testing.assert_close(got, eager, rtol=0, atol=1e-6)
    ran, raised = [], 0
    for i in range(len(blob)):
        pte = bytearray(kv_pte)
        pte[where.start + i] ^= 0xFF
        try:
            got = run_once(runtime, bytes(pte))
        except RuntimeError:
            raised += 1
            continue
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), \
            f"blob byte {i}: wrong answer"
        ran.append(i)
    assert set(ran) == never_read(blob)  # everything a reader reads is refused when flipped
    assert raised == len(blob) - len(ran) > 3000


def test_resealed_payload_flips_raise_or_run_never_crash(kv_pte, tmp_path):
    where = H.blob_in_pte(kv_pte)
    blob = B.parse(kv_pte[where])
    eng_start = where.stop - len(blob.engine)
    outcomes = {"raised": 0, "ran": 0}
    reasons = set()
    for k, i in enumerate(range(eng_start, where.stop, 5)):  # a dense sample: every 5th byte
        flipped = bytearray(kv_pte[where])
        flipped[i - where.start] ^= 0xFF
        pte = kv_pte[:where.start] + H.reseal(bytes(flipped)) + kv_pte[where.stop:]
        path = tmp_path / f"p{k}.pte"
        path.write_bytes(pte)
        try:
            tte.executorch.load(path).run(*call_inputs())
            outcomes["ran"] += 1
        except RuntimeError as e:
            outcomes["raised"] += 1
            if isinstance(e, runtime_lib.DelegateRefusedError):
                reasons.add(str(e))
    assert outcomes["raised"] > 0 and outcomes["ran"] > 0, outcomes
    # the nested program's own checks refuse at init, naming the delegate
    assert any("init refused the delegate blob: reference payload" in r and
               "(delegate of method 'forward': " in r for r in reasons)


def test_refusal_reason_and_delegate_are_in_the_exception(kv_pte, tmp_path):
    where = H.blob_in_pte(kv_pte)
    pte = bytearray(kv_pte)
    pte[where.stop - 1] ^= 0x01  # the payload's last byte
    path = tmp_path / "corrupt.pte"
    path.write_bytes(bytes(pte))
    with pytest.raises(runtime_lib.DelegateRefusedError) as e:
        tte.executorch.load(path)
    msg = str(e.value)
    assert msg.startswith("Failed to load method forward, error: 0x")
    assert ": TensorRTBackend: init refused the delegate blob: engine payload SHA-256 mismatch: " \
           "the metadata records " in msg
    assert msg.endswith(f"; the blob is corrupt: re-export the .pte (delegate of method "
                        f"'forward': {where.stop - where.start}-byte blob)")
    assert isinstance(e.value, RuntimeError)  # what callers caught before still catches it
    assert msg.endswith(": " + runtime_lib.last_refusal())
    assert runtime_lib.last_check() == "blob.engine_digest"  # python's BlobError.check names it
    with pytest.raises(B.BlobError) as py:
        B.parse(bytes(pte[where]))
    assert py.value.check == "blob.engine_digest"


class _ViewEngine(torch.nn.Module):
    """Views of an engine input (which is not memory planned): ExecuTorch emits et_view, whose
    output has no storage of its own and takes the input's data when it runs."""

    def forward(self, x):
        return x.view(4, 2).sum(dim=0) + x.view(2, 4)[1, :2]


class _ViewOuter(_ViewEngine):
    pass


def test_payload_views_of_unplanned_inputs_are_accepted(runtime):
    x = torch.arange(8, dtype=torch.float32)
    spec = H.EngineSpec(module=_ViewEngine(), inputs={"x": x}, outputs=["y"],
                        delegate_outputs=["y"])
    payload = H.payload_pte(spec.module, [x])
    assert b"et_view" in payload  # the payload really holds storage-less view tensors
    pte = H.delegated_pte(_ViewOuter(), {"x": x}, spec)
    (y,) = runtime.load_program(pte).load_method("forward").execute([x.clone()])
    assert torch.equal(y, _ViewEngine()(x))
