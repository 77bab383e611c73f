"""One copy-back record protocol for both engine kinds (`compiling.engine_records`): compile writes
who-copies into the engine's own `tte_copy_back` record (`COPY_BACK_ATTR`) — a reference engine
keeps it in its blob metadata, a TensorRT engine module as a plain attribute — and every reader
gets it back the same way; a second copy of one output is refused for either kind."""
from __future__ import annotations

import pytest
import torch

from e2e_models import MODELS
from torch_tensorrt_ext import reference
from torch_tensorrt_ext.contracts.plan import PlanError
from torch_tensorrt_ext.engines.reference_engine import ReferenceEngineModule
from torch_tensorrt_ext.engines.engine_module import COPY_BACK_ATTR
from torch_tensorrt_ext.compiling.engine_records import record_copy
from torch_tensorrt_ext.engines.engine_module import copy_record as recorded_copy_back


class _TensorRTLike(torch.nn.Module):
    """What the records read of torch-tensorrt's engine module: binding names, no copy record."""
    input_binding_names = ["x", "b_ring"]
    output_binding_names = ["output0", "output1"]


def _reference_engine() -> ReferenceEngineModule:
    """A real reference engine of a compiled model whose ring buffer is copied back."""
    factory, args_of, _ = MODELS["ring_buffer"]
    trt = reference.compile(factory().eval(), args_of(0))
    engines = [m for m in trt.modules() if isinstance(m, ReferenceEngineModule)]
    assert engines
    return engines[0]


def test_the_record_has_one_name_for_both_kinds():
    assert ReferenceEngineModule.tte_copy_back.fget.__name__ == COPY_BACK_ATTR


def test_a_tensorrt_engine_records_and_reads_back():
    m = _TensorRTLike()
    assert recorded_copy_back(m) == ()
    record_copy(m, "output1", "b_ring")
    assert getattr(m, COPY_BACK_ATTR) == [["output1", "b_ring"]]
    assert recorded_copy_back(m) == (("output1", "b_ring"),)
    with pytest.raises(PlanError, match="output 'output1' is recorded as copied back twice"):
        record_copy(m, "output1", "b_other")


def test_a_reference_engine_records_in_its_blob_metadata():
    engine = _reference_engine()
    compiled = recorded_copy_back(engine)      # what compile decided for this model
    assert compiled and engine.tte_copy_back == [list(p) for p in compiled]
    signature = engine.signature
    engine.tte_copy_back = []                  # the same protocol writes it
    assert recorded_copy_back(engine) == () and engine.signature != signature
    for output, input in compiled:
        record_copy(engine, output, input)
    assert recorded_copy_back(engine) == compiled and engine.signature == signature
    output, input = compiled[0]
    with pytest.raises(PlanError, match=f"output {output!r} is recorded as copied back twice"):
        record_copy(engine, output, input)
