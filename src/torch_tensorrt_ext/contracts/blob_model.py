"""The `TensorRTBackend` delegate blob's data model (docs/CONTRACTS.md §1): header layout,
dtype sizes, bindings, aliased I/O, buffers, copy-back and the metadata that holds them.

Invariant: the classes here are plain immutable data with derived views (inputs, outputs, byte
sizes); they hold no reading or validation logic and import nothing of this package but
`contracts.engine`, `contracts.dtypes` (the one dtype table), `contracts.named_key` (the
named-data keys' format) and `contracts.blob_checks` (the error), so the readers (`blob_json`,
`blob_metadata`, `blob_validate`, `blob`) build on them without import circles.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from .blob_checks import BlobError
from .dtypes import DTYPES
from .engine import AliasedIO  # one definition for the engine interface and the blob
from .named_key import KEY_PREFIX  # noqa: F401  (re-exported: the named-data keys' format)
from ..errors import UnknownName

__all__ = [
    "BlobError", "IOBinding", "AliasedIO", "BufferBinding", "CopyBack", "WeightRef", "EngineData",
    "BlobMetadata", "Blob", "DTYPES", "HEADER_FORMAT", "HEADER_SIZE", "TR03_HEADER_SIZE",
    "TTE_VERSION", "TTE_VERSIONS", "MAX_BINDING_BYTES",
]

HEADER_FORMAT = "<4sIIIQ8s"
HEADER_SIZE = struct.calcsize(HEADER_FORMAT)  # 32
# TR03: the upstream header, then the SHA-256 of the metadata bytes (CONTRACTS.md §1 Integrity).
TR03_HEADER_SIZE = HEADER_SIZE + 32
# The largest binding both readers accept (static dims x element size), as the C++ reader's
# kMaxBindingBytes.
MAX_BINDING_BYTES = (1 << 63) - 1
ENGINE_ALIGNMENT = 16
MAGIC_TR01, MAGIC_TR02, MAGIC_TR03 = b"TR01", b"TR02", b"TR03"
MAGICS = (MAGIC_TR01, MAGIC_TR02, MAGIC_TR03)
# 4: "weights" (a reference engine's weights as the program's named data). 5: "engine_data" (a
# TensorRT / TensorRT-RTX plan as named data, the payload empty): a version-4 reader ignores a key
# it does not know and would deserialize the empty payload, so the key needs its own version.
# Written: 5; read: 3 (every blob written before weights left the payload), 4 and 5.
TTE_VERSION = 5
TTE_VERSIONS = (3, 4, 5)
# Upstream writes b"\x01" + 7 zero bytes in the reserved field; we keep that value.
_RESERVED = b"\x01" + b"\x00" * 7
ENGINE_KINDS = ("reference", "tensorrt", "tensorrt_rtx")


# why a TR03 binding must carry its dtype and shape (both readers' messages)
UNKNOWN_IN_TR03 = ("only upstream TR01/TR02 blobs may leave a binding's dtype and shape to the "
                    "delegate's tensors (dtype '' and shape []); a TR03 blob must give both")

@dataclass(frozen=True)
class IOBinding:
    """An engine binding. dtype "" with shape () is an unknown binding (TR01/TR02 only): its
    dtype/shape come from the delegate's tensors at execute."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    is_input: bool
    # a binding with dynamic (-1) dims: each dim's upper bound (its static dims as they are), the
    # memory its delegate tensor is planned for; () when the blob gives none (TR03 "max_shape")
    max_shape: tuple[int, ...] = ()

    @property
    def known(self) -> bool:
        return self.dtype != ""

    @property
    def nbytes(self) -> int:
        if not self.known:
            raise BlobError(f"binding '{self.name}' has no dtype/shape in the blob (upstream "
                            f"TR01/TR02); its size is the delegate tensor's",
                            check="binding.unknown_size")
        n = DTYPES[self.dtype]
        for s in self.shape:
            n *= s
        return n


@dataclass(frozen=True)
class BufferBinding:
    """Input binding `input` carries the caller-owned buffer `fqn`."""

    input: str
    fqn: str


@dataclass(frozen=True)
class CopyBack:
    """Output binding `output` holds the new value of input binding `input` (copied back once)."""

    output: str
    input: str


@dataclass(frozen=True)
class WeightRef:
    """A weight of a reference engine kept out of its payload: the program's named data under
    `key` (`tte/sha256/<hex>`, the SHA-256 of its bytes), bound as the payload's next input
    after the input bindings, a static tensor of `dtype` and `shape` (TR03 version 4
    "weights"). Methods whose engines carry the same bytes name the same key: stored once."""

    key: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = DTYPES[self.dtype]
        for s in self.shape:
            n *= s
        return n


@dataclass(frozen=True)
class EngineData:
    """A TensorRT / TensorRT-RTX plan kept out of the payload (TR03 version 5 "engine_data"): the
    program's named data under `key` (`tte/sha256/<hex>`, the SHA-256 of the plan, checked once
    before it is deserialized), `nbytes` long; the blob's payload is empty. Methods whose engines
    are the same plan name the same key: stored once, deserialized once per program."""

    key: str
    nbytes: int


@dataclass(frozen=True)
class BlobMetadata:
    """The metadata of a blob, TR03 view. `delegate_inputs`/`delegate_outputs` left as None mean
    "every input/output binding, in binding order" (upstream's meaning)."""

    io_bindings: tuple[IOBinding, ...]
    aliased_io: tuple[AliasedIO, ...] = ()
    engine_kind: str = "tensorrt"
    delegate_inputs: tuple[str, ...] | None = None
    delegate_outputs: tuple[str, ...] | None = None
    buffers: tuple[BufferBinding, ...] = ()
    copy_back: tuple[CopyBack, ...] = ()
    hardware_compatible: bool = False
    device_id: int = 0
    serialized_metadata: str = ""
    target_platform: str = ""
    # TR03 "weight_streaming_budget": bytes of engine weights kept on the device
    # (torch_tensorrt.save's weight_streaming_budget_per_engine); None: TensorRT's own budget
    weight_streaming_budget: int | None = None
    # TR03 version 4 "weights": a reference engine's weights, the payload's trailing inputs
    weights: tuple[WeightRef, ...] = ()
    # TR03 version 5 "engine_data": the plan as named data (TensorRT kinds), the payload empty
    engine_data: EngineData | None = None
    # TR03 as read: the SHA-256 (hex) the metadata records for the engine payload. `serialize`
    # writes the digest of the payload it is given; not part of the metadata's identity.
    engine_sha256: str | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "io_bindings", tuple(self.io_bindings))
        object.__setattr__(self, "aliased_io", tuple(self.aliased_io))
        object.__setattr__(self, "buffers", tuple(self.buffers))
        object.__setattr__(self, "copy_back", tuple(self.copy_back))
        object.__setattr__(self, "weights", tuple(self.weights))
        if self.delegate_inputs is None:
            object.__setattr__(self, "delegate_inputs", tuple(self.input_names))
        else:
            object.__setattr__(self, "delegate_inputs", tuple(self.delegate_inputs))
        if self.delegate_outputs is None:
            object.__setattr__(self, "delegate_outputs", tuple(self.output_names))
        else:
            object.__setattr__(self, "delegate_outputs", tuple(self.delegate_outputs))

    @property
    def inputs(self) -> tuple[IOBinding, ...]:
        return tuple(b for b in self.io_bindings if b.is_input)

    @property
    def outputs(self) -> tuple[IOBinding, ...]:
        return tuple(b for b in self.io_bindings if not b.is_input)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.outputs)

    def written_buffers(self) -> dict[str, str]:
        """Output binding -> FQN of the buffer it writes: an aliased output (in place) or a
        copy-back the delegate makes, into an input binding that carries a named buffer."""
        fqn_of = {b.input: b.fqn for b in self.buffers}
        writes = {a.output: a.input for a in self.aliased_io}
        writes.update({c.output: c.input for c in self.copy_back})
        return {o: fqn_of[writes[o]] for o in self.output_names if writes.get(o) in fqn_of}

    def binding(self, name: str) -> IOBinding:
        for b in self.io_bindings:
            if b.name == name:
                return b
        raise UnknownName(name)

    def to_json_dict(self) -> dict[str, Any]:
        """TR03 metadata: upstream's keys first, in upstream's order, then the extensions."""
        return {
            "io_bindings": [dict({"name": b.name, "dtype": b.dtype, "shape": list(b.shape),
                                  "is_input": b.is_input},
                                 **({"max_shape": list(b.max_shape)} if b.max_shape else {}))
                            for b in self.io_bindings],
            "aliased_io": [{"output": a.output, "input": a.input, "kind": a.kind}
                           for a in self.aliased_io],
            "hardware_compatible": self.hardware_compatible,
            "device_id": self.device_id,
            "serialized_metadata": self.serialized_metadata,
            "target_platform": self.target_platform,
            "tte_version": TTE_VERSION,
            "engine_kind": self.engine_kind,
            "delegate_inputs": list(self.delegate_inputs),
            "delegate_outputs": list(self.delegate_outputs),
            "buffers": [{"input": b.input, "fqn": b.fqn} for b in self.buffers],
            "copy_back": [{"output": c.output, "input": c.input} for c in self.copy_back],
            **({} if self.weight_streaming_budget is None
               else {"weight_streaming_budget": self.weight_streaming_budget}),
            **({} if not self.weights else
               {"weights": [{"key": w.key, "dtype": w.dtype, "shape": list(w.shape)}
                            for w in self.weights]}),
            **({} if self.engine_data is None else
               {"engine_data": {"key": self.engine_data.key,
                                "nbytes": self.engine_data.nbytes}}),
        }


@dataclass(frozen=True)
class Blob:
    magic: bytes
    metadata: BlobMetadata
    engine: memoryview = field(repr=False)   # a read-only view of the parsed bytes, not a copy
