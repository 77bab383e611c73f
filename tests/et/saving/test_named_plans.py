"""TensorRT / TensorRT-RTX plans as ExecuTorch named data: the blob names its plan by
`tte/sha256/<hex of the plan>` (TR03 version 5 "engine_data", an empty payload), so methods whose
engines are the same plan store it once — in the `.pte`, or in its `.ptd` under
`save_data_externally`. The plans are real ones, built ahead of time by this machine's SDK (the
TensorRT-RTX builder runs on the CPU); no TensorRT engine runs here — that the runtime
deserializes a key once is unit-tested on the fake SDK (runtime/tests/test_shared_plans.cpp)."""
from __future__ import annotations

import hashlib

import pytest
import torch

from rtx_env import built_engine_kind, rtx_programs
from torch_tensorrt_ext import cli
from torch_tensorrt_ext.contracts import blob as blobfmt
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
from torch_tensorrt_ext.executorch.inspecting.traffic import flatbuffer_program
from torch_tensorrt_ext.contracts.engine_call import is_engine_call
from torch_tensorrt_ext.executorch.saving import lower
from torch_tensorrt_ext.executorch.saving.tensorrt_blob import tensor_bytes
from torch_tensorrt_ext.export.engine_calls import engine_record
from plan_models import DecayingState

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.inspects_pte]


ARGS = (torch.randn(1, 64),)


def _plan(ep: torch.export.ExportedProgram) -> bytes:
    """The serialized plan of `ep`'s one engine call, as the compiled module holds it."""
    from torch_tensorrt.dynamo.runtime._serialized_engine_layout import ENGINE_IDX
    (call,) = [n for n in ep.graph.nodes if is_engine_call(n)]
    plan = engine_record(ep, call, metadata_only=False)[ENGINE_IDX]
    return bytes(tensor_bytes(plan)) if isinstance(plan, torch.Tensor) else bytes(plan)


def _described(path, capsys) -> str:
    """What `torch-tensorrt-ext inspect PATH` prints."""
    capsys.readouterr()
    assert cli.main(["inspect", str(path)]) == 0
    return capsys.readouterr().out


def test_two_methods_with_one_plan_store_it_once_in_the_pte(tmp_path, capsys):
    path = tmp_path / "two.pte"
    programs = rtx_programs(DecayingState(64, seed=0), ARGS, ("prefill", "decode"))
    plan = _plan(programs["prefill"])
    assert _plan(programs["decode"]) == plan
    lower.save_pte(programs, str(path))
    pte = path.read_bytes()
    info = inspect_pte(pte)
    delegates = [d for m in info.methods for d in m.delegates]
    key = blobfmt.KEY_PREFIX + hashlib.sha256(plan).hexdigest()
    assert [(d.engine_kind, d.engine_bytes, d.plan) for d in delegates] == \
        [(built_engine_kind(), 0, (key, len(plan), True))] * 2   # the payload empty
    named = [e.key for e in flatbuffer_program(pte).named_data or () if e.key == key]
    assert named == [key]                          # one entry, both methods' engines name it
    assert pte.count(plan) == 1                     # the plan's bytes are in the file once
    assert len(pte) < len(plan) + 64 * 1024         # not twice: the rest is two small programs
    assert "plans: 1 named-data plans serve 2 engines (stored once, deserialized once per key)" \
        in _described(path, capsys)



def test_saved_with_its_data_externally_the_plan_is_in_the_ptd_once_not_in_the_pte(tmp_path,
                                                                                   capsys):
    import torch_tensorrt_ext as tte
    path = tmp_path / "two.pte"
    programs = rtx_programs(DecayingState(64, seed=0), ARGS, ("prefill", "decode"))
    plan = _plan(programs["prefill"])
    with tte.executorch.save_data_externally("model"):
        lower.save_pte(programs, str(path))
    pte, ptd = path.read_bytes(), (tmp_path / "model.ptd").read_bytes()
    assert (pte.count(plan), ptd.count(plan)) == (0, 1)
    assert len(pte) < 64 * 1024
    key = blobfmt.KEY_PREFIX + hashlib.sha256(plan).hexdigest()
    info = inspect_pte(pte)
    assert [d.plan for m in info.methods for d in m.delegates] == [(key, len(plan), False)] * 2
    assert f"plan: {len(plan)} bytes of named data {key}, in an external data file (.ptd)" \
        in _described(path, capsys)


def test_a_tiny_plan_stays_in_its_blob_a_real_one_is_named_data():
    """Under MIN_NAMED_PLAN_BYTES a plan stays inline (a named-data entry would cost more than
    it shares); from it on the blob names it and the plan is the program's named data."""
    from torch_tensorrt_ext.contracts import blob as blobfmt
    from torch_tensorrt_ext.executorch.saving.tensorrt_blob import (MIN_NAMED_PLAN_BYTES,
                                                                    engine_result)
    meta = blobfmt.BlobMetadata(io_bindings=(blobfmt.IOBinding("x", "float32", (2,), True),
                                             blobfmt.IOBinding("y", "float32", (2,), False)),
                                engine_kind="tensorrt_rtx", delegate_inputs=("x",),
                                delegate_outputs=("y",))
    tiny = memoryview(b"engine-bytes")
    inline = engine_result(meta, tiny, None)
    parsed = blobfmt.parse(inline.processed_bytes)
    assert bytes(parsed.engine) == b"engine-bytes" and parsed.metadata.engine_data is None
    assert inline.data_store_output is None
    big = memoryview(bytes(range(256)) * (MIN_NAMED_PLAN_BYTES // 256))
    named = engine_result(meta, big, None)
    parsed = blobfmt.parse(named.processed_bytes)
    store = named.data_store_output
    entry = store.pte_data[parsed.metadata.engine_data.key]
    assert bytes(parsed.engine) == b"" and store.buffers[entry.buffer_index].to_bytes() == big
