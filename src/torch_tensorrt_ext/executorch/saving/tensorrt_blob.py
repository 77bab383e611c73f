"""A torch-tensorrt engine's partition → a TR03 blob carrying its serialized engine untouched.

Invariant: every binding gets the dtype and shape the engine's own metadata records (refused,
naming the engine, when it records none), aliased I/O and the outputs the delegate copies back
(`copy_back`) are the engine's record, buffers are the partitioner's `tte_buffers` spec, the
engine kind names the SDK that built it (`tensorrt` or `tensorrt_rtx`), the weight streaming
budget is the save option's, and the blob is validated before it is written. The plan is not in
the blob: it is the program's named data under `tte/sha256/<hex of the plan>` (TR03 version 5
"engine_data"), a view of the bytes the compiled module holds (not a copy), so methods whose
engines are the same plan store it once — in the `.pte`, or in its `.ptd` under
`save_data_externally`.
"""
from __future__ import annotations

import dataclasses
import json

import torch
from executorch.exir.backend.backend_details import PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from torch.export import ExportedProgram

from ...contracts import blob as blobfmt
from ...contracts.engine_call import is_engine_call
from ...contracts.named_key import named_key
from ...contracts.target_device import parse_target_device
from ...contracts.tensor_bytes import tensor_bytes
from ...engines.dynamic_dims import max_shape
from ...engines.tensorrt_info import TensorRTInfoError
from ...errors import Unsupported
from ...export.engine_calls import engine_info, engine_record
from .delegate_io import delegate_input_bindings, delegate_output_bindings, single_engine_call
from .named_data import named_data

__all__ = ["preprocess", "tensor_bytes", "BUFFERS_SPEC", "DEVICE_SPEC"]

BUFFERS_SPEC = "tte_buffers"
DEVICE_SPEC = "target_device"
# torch_tensorrt.save(weight_streaming_budget_per_engine=N): upstream's partitioner compile spec
# (torch_tensorrt.executorch.partitioner.WEIGHT_STREAMING_BUDGET_COMPILE_SPEC_KEY), ASCII bytes
WEIGHT_STREAMING_SPEC = "weight_streaming_budget"
# torch_tensorrt.save(..., external_data="NAME"): engine weights go to NAME.ptd beside the .pte
# (ExecuTorch's external data file) instead of into it; ASCII bytes
EXTERNAL_DATA_SPEC = "external_data"


def _engine_kind() -> str:
    """Which SDK built the engines of this process: torch-tensorrt-rtx builds TensorRT-RTX
    engines (a distinct engine kind: its runtime library, its devices), torch-tensorrt TensorRT."""
    from torch_tensorrt._features import ENABLED_FEATURES
    return "tensorrt_rtx" if getattr(ENABLED_FEATURES, "tensorrt_rtx", False) else "tensorrt"


def _bindings(info, call: torch.fx.Node) -> tuple:
    """Every binding with the dtype and shape the engine's metadata records (TR03 needs both),
    a dynamic one bounded by its value's upper bounds in the program (`max_shape`: the memory
    ExecuTorch plans for it; the runtime checks the engine's profile holds it)."""
    if len(info.input_dtypes) != len(info.input_names) or \
            len(info.output_dtypes) != len(info.output_names):
        raise TensorRTInfoError(f"engine {info.name!r}: its metadata records no binding types "
                                "(no inout_symexprs); recompile it with torch-tensorrt 2.14.0")
    in_vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None
               for a in call.args[0]]
    out_vals = list(call.meta.get("val") or ())

    def binding(name, dtype, shape, is_input, val):
        shape = tuple(shape)
        bound = max_shape(val, shape, name) if isinstance(val, torch.Tensor) else ()
        return blobfmt.IOBinding(name, dtype, shape, is_input, bound)
    ins = [binding(n, info.input_dtypes[i], info.input_shapes[i], True,
                   in_vals[i] if i < len(in_vals) else None)
           for i, n in enumerate(info.input_names)]
    outs = [binding(n, info.output_dtypes[i], info.output_shapes[i], False,
                    out_vals[i] if i < len(out_vals) else None)
            for i, n in enumerate(info.output_names)]
    return tuple(ins + outs)


def _device_id(target: str, engine_device: str) -> int:
    """The target device's index, else the device the engine was built on (its record's
    `id%major%minor%type%name` slot)."""
    index = parse_target_device(target)[1]
    return index if index is not None else int(engine_device.split("%")[0])


def preprocess(edge_program: ExportedProgram, compile_specs: list[CompileSpec]) -> PreprocessResult:
    """One TensorRT partition → one TR03 blob carrying the serialized engine."""
    from torch_tensorrt.dynamo.runtime._serialized_engine_layout import (
        DEVICE_IDX, ENGINE_IDX, HW_COMPATIBLE_IDX, REQUIRES_OUTPUT_ALLOCATOR_IDX,
        SERIALIZED_METADATA_IDX, TARGET_PLATFORM_IDX)
    call = single_engine_call(edge_program, is_engine_call)
    raw = engine_record(edge_program, call, metadata_only=False)
    flag = raw[REQUIRES_OUTPUT_ALLOCATOR_IDX]
    if (flag.decode() if isinstance(flag, bytes) else str(flag)) == "1":
        raise Unsupported(f"engine call {call.name!r} requires an output allocator (data-dependent "
                          "output shapes), which the ExecuTorch delegate does not provide; keep "
                          "the data-dependent ops out of the engine (torch_executed_ops)")
    engine = raw[ENGINE_IDX]
    engine = tensor_bytes(engine) if isinstance(engine, torch.Tensor) else \
        memoryview(engine).cast("B")
    info = engine_info(edge_program, call, raw)
    specs = {s.key: s.value for s in compile_specs}
    pairs = json.loads(specs.get(BUFFERS_SPEC, b"[]").decode())
    device = specs.get(DEVICE_SPEC, b"cuda").decode()  # no index: the engine's own device
    text = [v.decode() if isinstance(v, bytes) else str(v) for v in raw]
    meta = blobfmt.BlobMetadata(
        io_bindings=_bindings(info, call), aliased_io=info.aliased_io, engine_kind=_engine_kind(),
        delegate_inputs=tuple(delegate_input_bindings(edge_program, call,
                                                      list(info.input_names))),
        delegate_outputs=tuple(delegate_output_bindings(edge_program, call,
                                                        list(info.output_names))),
        buffers=tuple(blobfmt.BufferBinding(i, f) for i, f in pairs),
        copy_back=tuple(blobfmt.CopyBack(o, i) for o, i in info.copy_back),
        hardware_compatible=text[HW_COMPATIBLE_IDX] == "1",
        device_id=_device_id(device, text[DEVICE_IDX]),
        serialized_metadata=text[SERIALIZED_METADATA_IDX],
        target_platform=text[TARGET_PLATFORM_IDX],
        weight_streaming_budget=(int(specs[WEIGHT_STREAMING_SPEC].decode())
                                 if WEIGHT_STREAMING_SPEC in specs else None))
    external = specs.get(EXTERNAL_DATA_SPEC)
    return engine_result(meta, engine, external.decode() if external else None)


# A plan smaller than this stays inside its blob (as a weight under MIN_WEIGHT_BYTES stays in its
# program): a named-data entry and its digest cost more than they could share. Real TensorRT
# plans are 100 KB and more.
MIN_NAMED_PLAN_BYTES = 4096


def engine_result(meta: blobfmt.BlobMetadata, plan: memoryview,
                  external: str | None) -> PreprocessResult:
    """The blob with its plan inline when it is under `MIN_NAMED_PLAN_BYTES`, else the plan as
    named data (`plan_as_named_data`)."""
    if 0 < len(plan) < MIN_NAMED_PLAN_BYTES:
        return PreprocessResult(processed_bytes=blobfmt.serialize(meta, bytes(plan)))
    return plan_as_named_data(meta, plan, external)


def plan_as_named_data(meta: blobfmt.BlobMetadata, plan: memoryview,
                       external: str | None) -> PreprocessResult:
    """The blob (`engine_data`, an empty payload) and the plan as named data under its digest's
    key (the view handed over: the one hash of the plan is the key's, no copy)."""
    if not len(plan):
        raise blobfmt.BlobError("the engine's serialized plan is empty; rebuild the engine")
    key = named_key(plan)
    meta = dataclasses.replace(meta, engine_data=blobfmt.EngineData(key, len(plan)))
    return PreprocessResult(processed_bytes=blobfmt.serialize(meta, b""),
                            data_store_output=named_data([(key, plan)], external))
