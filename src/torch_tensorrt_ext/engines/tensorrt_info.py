"""The TensorRT side of the engine interface: `EngineInfo` from torch-tensorrt 2.14.0 artifacts.

Two artifacts describe a torch-tensorrt engine without TensorRT being installed:

- the *serialized engine info*, the list of strings that `TorchTensorRTModule._pack_engine_info`
  builds and `torch.classes.tensorrt.Engine` pickles (`TRTEngine::serialize` / `def_pickle`):
  13 slots at the indices of `SerializedInfoIndex` in
  torch_tensorrt/dynamo/runtime/_serialized_engine_layout.py (ABI version "10");
- the ExecuTorch delegate blob (TR01/TR02 from upstream, TR03 from this project), read by
  `torch_tensorrt_ext.contracts.blob.parse`.

Invariant: the binding names, `aliased_io`, device and (where the artifact has them) shapes and
dtypes of every `EngineInfo` returned here come from the artifact alone, read fail-closed — an
unknown ABI version, a wrong slot count, a malformed binding list, device string, `aliased_io`
record or metadata payload raises `TensorRTInfoError` naming the engine and what is wrong; nothing
is skipped (upstream's reader drops a malformed `aliased_io` record with a warning, which would
silently turn an in-place write into a lost one). Unpickling the metadata never runs code: the
restricted unpickler resolves only plain containers, torch dtypes and an explicit list of upstream
settings/enum classes and sympy shape-expression classes, all of them as inert stand-ins.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import io
import pickle
from typing import Any
from collections.abc import Sequence

import torch

from ..errors import TteError
from ..contracts import blob as blobfmt
from ..contracts.engine import AliasedIO, EngineInfo

__all__ = [
    "ABI_VERSION", "SERIALIZATION_LEN", "TensorRTInfoError", "PickledObject", "SymbolicDim",
    "engine_info_from_serialized", "engine_info_from_blob", "engine_info_from_metadata",
    "decode_metadata", "COPY_BACK_KEY",
]

# The key this project adds to the metadata dict of an engine whose delegate copies copy-back
# outputs into their buffers: a list of [output, input] pairs, as compile decided them
# (`lowering.copier`). Compile records it on the engine module as the attribute of the same name
# (`engine_module.COPY_BACK_ATTR`); patch 0004's `TorchTensorRTModule._pack_engine_info` packs it.
COPY_BACK_KEY = "tte_copy_back"

# torch_tensorrt/dynamo/runtime/_serialized_engine_layout.py: ABI_VERSION, SerializedInfoIndex,
# SERIALIZED_*_DELIM (mirrors core/runtime/runtime.h and register_jit_hooks.cpp).
ABI_VERSION = "10"
(ABI_TARGET_IDX, NAME_IDX, DEVICE_IDX, ENGINE_IDX, INPUT_BINDING_NAMES_IDX,
 OUTPUT_BINDING_NAMES_IDX, HW_COMPATIBLE_IDX, SERIALIZED_METADATA_IDX, TARGET_PLATFORM_IDX,
 REQUIRES_OUTPUT_ALLOCATOR_IDX, RESOURCE_ALLOCATION_STRATEGY_IDX,
 REQUIRES_NATIVE_MULTIDEVICE_IDX, ALIASED_IO_IDX) = range(13)
SERIALIZATION_LEN = 13
_SLOTS = ("ABI version", "name", "device info", "engine", "input binding names",
          "output binding names", "hardware-compatible flag", "serialized metadata",
          "target platform", "requires-output-allocator flag",
          "resource-allocation-strategy flag", "requires-native-multidevice flag", "aliased_io")
_FLAG_SLOTS = (HW_COMPATIBLE_IDX, REQUIRES_OUTPUT_ALLOCATOR_IDX, RESOURCE_ALLOCATION_STRATEGY_IDX,
               REQUIRES_NATIVE_MULTIDEVICE_IDX)
BINDING_DELIM = "%"        # SERIALIZED_ENGINE_BINDING_DELIM
DEVICE_DELIM = "%"         # SERIALIZED_RT_DEVICE_DELIM: id%major%minor%device_type%name
ALIAS_RECORD_DELIM = "%"   # SERIALIZED_ALIASED_IO_RECORD_DELIM
ALIAS_FIELD_DELIM = "@"    # SERIALIZED_ALIASED_IO_FIELD_DELIM: output@input@kind
_DEVICE_TYPES = {0: "cuda", 1: "dla"}  # nvinfer1::DeviceType kGPU, kDLA


class TensorRTInfoError(TteError, ValueError):
    """A torch-tensorrt engine artifact is unreadable; the message names the engine and what."""


# ----------------------------------------------------------------------- restricted unpickling

class PickledObject:
    """Inert stand-in for an object of an allowed upstream class: it records the class name, the
    constructor arguments and the pickled state, and never calls upstream code."""

    pickled_class = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> PickledObject:
        self = object.__new__(cls)
        self.args, self.kwargs, self.state = args, kwargs, None
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __repr__(self) -> str:
        return f"<pickled {self.pickled_class} args={self.args!r} state={self.state!r}>"


class SymbolicDim(PickledObject):
    """Stand-in for a sympy shape expression (a dynamic dimension); read as -1."""


_UPSTREAM_CLASSES = {  # what `_pack_engine_info`'s metadata dict holds in 2.14.0
    ("torch_tensorrt.dynamo._settings", "CompilationSettings"),
    ("torch_tensorrt._Device", "Device"),
    ("torch_tensorrt._enums", "dtype"),
    ("torch_tensorrt._enums", "DeviceType"),
    ("torch_tensorrt._enums", "EngineCapability"),
    ("torch_tensorrt._enums", "Platform"),
}
_SYMPY_CLASSES = {  # `inout_symexprs` dims (_symbolic_shape_capture.py: `dim_size.node.expr`)
    ("sympy.core.symbol", n) for n in ("Symbol", "Dummy")} | {
    ("sympy.core.add", "Add"), ("sympy.core.mul", "Mul"), ("sympy.core.power", "Pow"),
    ("sympy.core.mod", "Mod")} | {
    ("sympy.core.numbers", n) for n in ("Integer", "Rational", "One", "Zero", "NegativeOne",
                                        "Half", "Infinity", "NegativeInfinity")} | {
    ("sympy.functions.elementary.miscellaneous", n) for n in ("Max", "Min")} | {
    ("sympy.functions.elementary.integers", n) for n in ("floor", "ceiling")} | {
    ("torch.utils._sympy.functions", n) for n in (
        "FloorDiv", "CeilDiv", "CleanDiv", "ModularIndexing", "Mod", "PythonMod", "Max", "Min",
        "FloorToInt", "CeilToInt", "TruncToInt", "RoundToInt", "IntTrueDiv", "PowByNatural",
        "Identity")} | {
    ("torch.utils._sympy.numbers", n) for n in ("IntInfinity", "NegativeIntInfinity")}
_TORCH_DTYPES = {n: getattr(torch, n) for n in dir(torch)
                 if isinstance(getattr(torch, n), torch.dtype)}
_BUILTINS = {"set": set, "frozenset": frozenset}
_stand_ins: dict[tuple[str, str], type] = {}


def _stand_in(module: str, name: str, base: type) -> type:
    key = (module, name)
    if key not in _stand_ins:
        _stand_ins[key] = type(name, (base,), {"pickled_class": f"{module}.{name}"})
    return _stand_ins[key]


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, engine: str) -> None:
        super().__init__(io.BytesIO(data))
        self.engine = engine

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _BUILTINS:
            return _BUILTINS[name]
        if module == "torch" and name in _TORCH_DTYPES:
            return _TORCH_DTYPES[name]
        if (module, name) in _UPSTREAM_CLASSES:
            return _stand_in(module, name, PickledObject)
        if (module, name) in _SYMPY_CLASSES:
            return _stand_in(module, name, SymbolicDim)
        raise TensorRTInfoError(
            f"engine {self.engine!r}: serialized metadata pickles {module}.{name}, which this "
            "reader refuses to load (it allows only containers, strings, numbers, torch dtypes, "
            "torch-tensorrt's settings/device/enum classes and sympy shape expressions); the "
            "metadata is not what torch-tensorrt 2.14.0 writes — do not load this engine")

    def persistent_load(self, pid: Any) -> Any:
        raise TensorRTInfoError(f"engine {self.engine!r}: serialized metadata uses a persistent "
                                f"id {str(pid)[:40]!r}, which torch-tensorrt never writes")


def decode_metadata(encoded: str, *, engine: str) -> dict[str, Any]:
    """Decode `SERIALIZED_METADATA_IDX` — base64 of a pickled dict (`TorchTensorRTModule.
    encode_metadata`) — without running code. Upstream classes come back as `PickledObject`s,
    sympy expressions as `SymbolicDim`s, torch dtypes as themselves."""
    try:
        raw = base64.b64decode(encoded.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise TensorRTInfoError(f"engine {engine!r}: serialized metadata is not base64 "
                                f"(starts {encoded[:24]!r})") from None
    try:
        obj = _RestrictedUnpickler(raw, engine).load()
    except TensorRTInfoError:
        raise
    except Exception as e:  # malformed pickle: no code can have run, only our stand-ins
        raise TensorRTInfoError(f"engine {engine!r}: serialized metadata is not a valid pickle "
                                f"({type(e).__name__}: {e})") from None
    if not isinstance(obj, dict):
        raise TensorRTInfoError(f"engine {engine!r}: serialized metadata must unpickle to a dict "
                                f"with 'settings' and 'inout_symexprs', got {type(obj).__name__}")
    return obj


# ----------------------------------------------------------------------------- slot parsing

def _slots(info: Sequence[str | bytes], name: str | None) -> tuple[str, list[str]]:
    """The engine's label and its 13 slots as text (the engine slot is left as "")."""
    if isinstance(info, (str, bytes)) or not isinstance(info, Sequence):
        raise TensorRTInfoError(f"engine {name or '<unnamed>'!r}: serialized info must be a list "
                                f"of strings, got {type(info).__name__}")
    label = name
    if label is None and len(info) > NAME_IDX and isinstance(info[NAME_IDX], (str, bytes)):
        label = _text(info[NAME_IDX], "<unnamed>", NAME_IDX)
    label = label or "<unnamed>"
    if not info:
        raise TensorRTInfoError(f"engine {label!r}: serialized info is empty")
    abi = _text(info[ABI_TARGET_IDX], label, ABI_TARGET_IDX)
    if abi != ABI_VERSION:
        raise TensorRTInfoError(
            f"engine {label!r}: serialized info targets Torch-TensorRT ABI version {abi!r}, but "
            f"this reader understands ABI version {ABI_VERSION!r} (torch-tensorrt 2.14.0); "
            "re-export the engine with torch-tensorrt 2.14.0")
    if len(info) != SERIALIZATION_LEN:
        raise TensorRTInfoError(f"engine {label!r}: serialized info of ABI {ABI_VERSION} has "
                                f"{SERIALIZATION_LEN} slots, got {len(info)}")
    return label, ["" if i == ENGINE_IDX else _text(v, label, i) for i, v in enumerate(info)]


def _text(value: Any, engine: str, idx: int) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            raise TensorRTInfoError(f"engine {engine!r}: slot {idx} ({_SLOTS[idx]}) is not UTF-8 "
                                    f"at byte {e.start}") from None
    raise TensorRTInfoError(f"engine {engine!r}: slot {idx} ({_SLOTS[idx]}) must be str or "
                            f"bytes, got {type(value).__name__}")


def _binding_names(text: str, engine: str, idx: int) -> tuple[str, ...]:
    names = tuple(text.split(BINDING_DELIM)) if text else ()
    for i, n in enumerate(names):
        if not n:
            raise TensorRTInfoError(f"engine {engine!r}: {_SLOTS[idx]} {text!r} has an empty "
                                    f"name at position {i}")
    return names


def _device(text: str, engine: str) -> str:
    tokens = text.split(DEVICE_DELIM, 4)
    try:
        numbers = [int(t) for t in tokens[:4]]
    except ValueError:
        numbers = []
    if len(tokens) != 5 or len(numbers) != 4:
        raise TensorRTInfoError(f"engine {engine!r}: device info {text!r} is not "
                                "'id%sm_major%sm_minor%device_type%name'")
    gpu_id, _major, _minor, dev_type = numbers
    if dev_type not in _DEVICE_TYPES or gpu_id < 0:
        raise TensorRTInfoError(f"engine {engine!r}: device info {text!r} names device type "
                                f"{dev_type} / id {gpu_id}; known types are 0 (GPU) and 1 (DLA)")
    return f"{_DEVICE_TYPES[dev_type]}:{gpu_id}"


def _aliased_io(text: str, engine: str) -> tuple[AliasedIO, ...]:
    out = []
    for rec in text.split(ALIAS_RECORD_DELIM) if text else ():
        fields = rec.split(ALIAS_FIELD_DELIM)
        if len(fields) != 3 or not all(fields):
            raise TensorRTInfoError(
                f"engine {engine!r}: aliased_io record {rec!r} is not 'output@input@kind'; "
                "refusing to drop it (its output would no longer be written in place)")
        out.append(AliasedIO(output=fields[0], input=fields[1], kind=fields[2]))
    return tuple(out)


# ------------------------------------------------------------------------- shapes and dtypes

def _io_entries(symexprs: Any, key: str, engine: str) -> list[tuple[tuple[int, ...], str]]:
    entries = symexprs.get(key) if isinstance(symexprs, dict) else None
    if not isinstance(entries, list):
        raise TensorRTInfoError(f"engine {engine!r}: metadata inout_symexprs must be a dict "
                                f"with an {key!r} list")
    out = []
    for i, e in enumerate(entries):
        where = f"engine {engine!r}: metadata inout_symexprs[{key!r}][{i}]"
        dims = e.get("shape_exprs") if isinstance(e, dict) else None
        dtype = e.get("dtype") if isinstance(e, dict) else None
        if not isinstance(dims, list) or not isinstance(dtype, torch.dtype):
            raise TensorRTInfoError(f"{where} must hold a 'shape_exprs' list and a torch 'dtype'")
        shape = []
        for d in dims:
            if isinstance(d, SymbolicDim):
                shape.append(-1)
            elif isinstance(d, int) and not isinstance(d, bool) and d >= 0:
                shape.append(d)
            else:
                raise TensorRTInfoError(f"{where}: dimension {d!r} is neither a size nor a "
                                        "sympy expression")
        out.append((tuple(shape), str(dtype).replace("torch.", "")))
    return out


def _io_types(meta: dict[str, Any], engine: str, inputs: tuple[str, ...],
              outputs: tuple[str, ...], aliased: tuple[AliasedIO, ...]) -> dict[str, tuple]:
    """Shapes/dtypes from `inout_symexprs` (absent/None: none). Entries are positional: inputs
    match the input bindings; outputs the graph outputs, after which the interpreter appends the
    aliased outputs (`user_output_count`), typed like the input they alias."""
    symexprs = meta.get("inout_symexprs")
    if symexprs is None:
        return {}
    ins = _io_entries(symexprs, "inputs", engine)
    outs = _io_entries(symexprs, "outputs", engine)
    if len(ins) != len(inputs):
        raise TensorRTInfoError(f"engine {engine!r}: metadata describes {len(ins)} inputs but "
                                f"the engine has {len(inputs)} input bindings {list(inputs)}")
    by_input = dict(zip(inputs, ins, strict=False))
    source = {a.output: a.input for a in aliased}
    extra = outputs[len(outs):]
    if len(outs) > len(outputs) or any(o not in source for o in extra):
        raise TensorRTInfoError(
            f"engine {engine!r}: metadata describes {len(outs)} outputs but the engine has "
            f"{len(outputs)} output bindings {list(outputs)}, and only aliased outputs may be "
            "appended after the graph's own")
    outs = outs + [by_input[source[o]] for o in extra]
    return dict(input_shapes=tuple(s for s, _ in ins), input_dtypes=tuple(d for _, d in ins),
                output_shapes=tuple(s for s, _ in outs), output_dtypes=tuple(d for _, d in outs))


# --------------------------------------------------------------------------------- readers

def engine_info_from_serialized(info: Sequence[str | bytes], *, name: str | None = None,
                                input_buffers: Sequence[tuple[str, str]] = (),
                                output_buffers: Sequence[tuple[str, str]] = ()) -> EngineInfo:
    """`EngineInfo` from torch-tensorrt 2.14.0's serialized engine info (a `_pack_engine_info` /
    `Engine.__getstate__` list). `name` overrides the NAME slot; `input_buffers` /
    `output_buffers` (binding -> buffer FQN) come from whoever lifted the buffers. The engine
    bytes are not read, so the slot may hold raw bytes, base64 text or be empty."""
    label, s = _slots(info, name)
    for idx in _FLAG_SLOTS:
        if s[idx] not in ("0", "1"):
            raise TensorRTInfoError(f"engine {label!r}: slot {idx} ({_SLOTS[idx]}) must be "
                                    f"'0' or '1', got {s[idx]!r}")
    inputs = _binding_names(s[INPUT_BINDING_NAMES_IDX], label, INPUT_BINDING_NAMES_IDX)
    outputs = _binding_names(s[OUTPUT_BINDING_NAMES_IDX], label, OUTPUT_BINDING_NAMES_IDX)
    aliased = _aliased_io(s[ALIASED_IO_IDX], label)
    device = _device(s[DEVICE_IDX], label)
    try:  # EngineInfo checks aliased_io/buffers against the bindings, naming the engine
        info = EngineInfo(name=label, input_names=inputs, output_names=outputs,
                          aliased_io=aliased, input_buffers=tuple(map(tuple, input_buffers)),
                          output_buffers=tuple(map(tuple, output_buffers)),
                          device=device, kind="tensorrt")
    except ValueError as e:
        raise TensorRTInfoError(str(e)) from None
    if not s[SERIALIZED_METADATA_IDX]:
        return info
    meta = decode_metadata(s[SERIALIZED_METADATA_IDX], engine=label)
    try:
        return dataclasses.replace(info, **_io_types(meta, label, inputs, outputs, aliased),
                                   copy_back=_copy_back(meta, label))
    except ValueError as e:
        if isinstance(e, TensorRTInfoError):
            raise
        raise TensorRTInfoError(str(e)) from None


def _copy_back(meta: dict[str, Any], engine: str) -> tuple[tuple[str, str], ...]:
    pairs = meta.get(COPY_BACK_KEY, [])
    if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) and x for x in p)
            for p in pairs):
        raise TensorRTInfoError(f"engine {engine!r}: metadata {COPY_BACK_KEY!r} must be a list "
                                f"of [output, input] binding names, got {pairs!r}")
    return tuple((o, i) for o, i in pairs)


def engine_info_from_blob(data: bytes, *, name: str) -> EngineInfo:
    """`EngineInfo` from a TensorRTBackend delegate blob (upstream TR01/TR02, or TR03)."""
    try:
        meta = blobfmt.parse(data).metadata
    except blobfmt.BlobError as e:
        raise TensorRTInfoError(f"engine {name!r}: {e}") from None
    return engine_info_from_metadata(meta, name=name)


def engine_info_from_metadata(meta: blobfmt.BlobMetadata, *, name: str) -> EngineInfo:
    """`EngineInfo` from validated blob metadata (a blob's, or a reference engine call's
    signature). Buffers come from TR03's `buffers` entries: input binding -> FQN, and each
    aliased or copy-back output -> the FQN of the input it writes; `copy_back` is the metadata's.
    Dtypes/shapes are the metadata's (upstream's real TR01/TR02 blobs leave them empty: then they
    are "" and ()). Device: `cuda:<device_id>` for a TensorRT engine, `cpu` for a reference
    engine."""
    return EngineInfo(
        name=name, input_names=meta.input_names, output_names=meta.output_names,
        aliased_io=tuple(meta.aliased_io),
        input_buffers=tuple((b.input, b.fqn) for b in meta.buffers),
        output_buffers=tuple(meta.written_buffers().items()),
        device=f"cuda:{meta.device_id}" if meta.engine_kind != "reference" else "cpu",
        kind=meta.engine_kind,
        input_shapes=tuple(b.shape for b in meta.inputs),
        output_shapes=tuple(b.shape for b in meta.outputs),
        input_dtypes=tuple(b.dtype for b in meta.inputs),
        output_dtypes=tuple(b.dtype for b in meta.outputs),
        copy_back=tuple((c.output, c.input) for c in meta.copy_back))
