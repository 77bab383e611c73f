"""The `TensorRTBackend` delegate blob (docs/CONTRACTS.md §1): read TR01/TR02/TR03, write TR03.

Invariant: `parse` returns only blobs the C++ runtime (runtime/src/blob.cpp) would accept, and
`serialize` writes only blobs `parse` accepts — the same validation runs on both paths and on the
C++ side (tests/test_blob_differential.py compares them), and anything else fails closed with a
`BlobError` — never another exception — that names what is wrong (the magic
found, the byte range past the end, the binding name, the two shapes that differ, ...). In
particular every engine output is accounted for: a delegate output, an aliased output written in
place through its input, or a copy-back output; a write is never silently dropped. A TR03 blob is
sealed: `serialize` records the SHA-256 of the payload in the metadata (`engine_sha256`) and the
SHA-256 of the metadata in the header's bytes [32, 64); `parse` refuses a blob whose bytes do not
hash to them (CONTRACTS.md §1 "Integrity").

TR01/TR02 (upstream torch-tensorrt 2.14.0) carry no extension keys; parsing one fills the TR03
view with upstream's meaning: a TensorRT engine whose delegate inputs/outputs are all input/output
bindings in binding order. Extension keys in a TR01/TR02 blob are ignored, as upstream does.

Upstream's `TensorRTBackend.preprocess` does not know its bindings' types and writes them with
dtype "" and shape []: in a TR01/TR02 blob such a binding is *unknown* (`IOBinding.known` is
False) and its dtype/shape are taken from the delegate's tensors at execute. A check that needs
them is left to the runtime's execute for the unknown side only (an aliased pair with an unknown
side is compared there); a TR03 blob must give every binding's dtype and shape.
"""
from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from ..engines.info import AliasedIO  # one definition for the engine interface and the blob
from ..errors import TteError

__all__ = [
    "BlobError", "IOBinding", "AliasedIO", "BufferBinding", "CopyBack", "BlobMetadata", "Blob",
    "parse", "serialize", "DTYPES", "HEADER_FORMAT", "HEADER_SIZE", "TR03_HEADER_SIZE",
    "TTE_VERSION", "MAX_BINDING_BYTES",
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
TTE_VERSION = 3
# Upstream writes b"\x01" + 7 zero bytes in the reserved field; we keep that value.
_RESERVED = b"\x01" + b"\x00" * 7
ENGINE_KINDS = ("reference", "tensorrt")
# dtype name -> element size in bytes (the same table as runtime/src/dtype.cpp).
DTYPES: Dict[str, int] = {
    "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int8": 1, "uint8": 1,
    "bool": 1, "float64": 8,
}


class BlobError(TteError, ValueError):
    """A delegate blob is malformed or inconsistent; the message says what and where."""


@dataclass(frozen=True)
class IOBinding:
    """An engine binding. dtype "" with shape () is an unknown binding (TR01/TR02 only): its
    dtype/shape come from the delegate's tensors at execute."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    is_input: bool

    @property
    def known(self) -> bool:
        return self.dtype != ""

    @property
    def nbytes(self) -> int:
        if not self.known:
            raise BlobError(f"binding '{self.name}' has no dtype/shape in the blob (upstream "
                            f"TR01/TR02); its size is the delegate tensor's")
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
class BlobMetadata:
    """The metadata of a blob, TR03 view. `delegate_inputs`/`delegate_outputs` left as None mean
    "every input/output binding, in binding order" (upstream's meaning)."""

    io_bindings: Tuple[IOBinding, ...]
    aliased_io: Tuple[AliasedIO, ...] = ()
    engine_kind: str = "tensorrt"
    delegate_inputs: Optional[Tuple[str, ...]] = None
    delegate_outputs: Optional[Tuple[str, ...]] = None
    buffers: Tuple[BufferBinding, ...] = ()
    copy_back: Tuple[CopyBack, ...] = ()
    hardware_compatible: bool = False
    device_id: int = 0
    serialized_metadata: str = ""
    target_platform: str = ""
    # TR03 as read: the SHA-256 (hex) the metadata records for the engine payload. `serialize`
    # writes the digest of the payload it is given; not part of the metadata's identity.
    engine_sha256: Optional[str] = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "io_bindings", tuple(self.io_bindings))
        object.__setattr__(self, "aliased_io", tuple(self.aliased_io))
        object.__setattr__(self, "buffers", tuple(self.buffers))
        object.__setattr__(self, "copy_back", tuple(self.copy_back))
        if self.delegate_inputs is None:
            object.__setattr__(self, "delegate_inputs", tuple(self.input_names))
        else:
            object.__setattr__(self, "delegate_inputs", tuple(self.delegate_inputs))
        if self.delegate_outputs is None:
            object.__setattr__(self, "delegate_outputs", tuple(self.output_names))
        else:
            object.__setattr__(self, "delegate_outputs", tuple(self.delegate_outputs))

    @property
    def inputs(self) -> Tuple[IOBinding, ...]:
        return tuple(b for b in self.io_bindings if b.is_input)

    @property
    def outputs(self) -> Tuple[IOBinding, ...]:
        return tuple(b for b in self.io_bindings if not b.is_input)

    @property
    def input_names(self) -> Tuple[str, ...]:
        return tuple(b.name for b in self.inputs)

    @property
    def output_names(self) -> Tuple[str, ...]:
        return tuple(b.name for b in self.outputs)

    def binding(self, name: str) -> IOBinding:
        for b in self.io_bindings:
            if b.name == name:
                return b
        raise KeyError(name)

    def to_json_dict(self) -> Dict[str, Any]:
        """TR03 metadata: upstream's keys first, in upstream's order, then the extensions."""
        return {
            "io_bindings": [{"name": b.name, "dtype": b.dtype, "shape": list(b.shape),
                             "is_input": b.is_input} for b in self.io_bindings],
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
        }


@dataclass(frozen=True)
class Blob:
    magic: bytes
    metadata: BlobMetadata
    engine: bytes = field(repr=False)


# ------------------------------------------------------------------------------------ validation
# Reading and validating metadata live in blob_validate (imported here on first use: it imports
# this module's data model).

def validate(meta: BlobMetadata, magic: bytes = MAGIC_TR03) -> None:
    """Raise `BlobError` unless `meta` is self-consistent (CONTRACTS.md §1, "Validation") as a
    blob with `magic` (TR03, what `serialize` writes, refuses unknown bindings)."""
    from . import blob_validate
    blob_validate.validate(meta, magic)


def _parse_metadata(magic: bytes, raw: bytes) -> BlobMetadata:
    """The metadata bytes of a blob with `magic`, read (not yet validated); `BlobError` if bad."""
    from . import blob_validate
    return blob_validate.parse_metadata(magic, raw)


# --------------------------------------------------------------------------------------- reading

def parse(data: bytes) -> Blob:
    """Parse and validate a TR01/TR02/TR03 blob; raise `BlobError` naming what is wrong."""
    data = bytes(data)
    n = len(data)
    if n < HEADER_SIZE:
        raise BlobError(f"blob is {n} bytes, shorter than its {HEADER_SIZE}-byte header")
    magic, md_off, md_size, eng_off, eng_size, _ = struct.unpack(HEADER_FORMAT, data[:HEADER_SIZE])
    if magic not in MAGICS:
        raise BlobError(f"unsupported blob magic {magic!r}: this reader accepts TR01, TR02 "
                        f"and TR03")
    header = TR03_HEADER_SIZE if magic == MAGIC_TR03 else HEADER_SIZE
    if md_off < header:
        raise BlobError(f"metadata offset {md_off} lies inside the {header}-byte header")
    if md_off + md_size > n:
        raise BlobError(f"metadata [{md_off}, {md_off + md_size}) runs past the end of the "
                        f"{n}-byte blob")
    if eng_off % ENGINE_ALIGNMENT:
        raise BlobError(f"engine offset {eng_off} is not {ENGINE_ALIGNMENT}-byte aligned")
    if eng_off + eng_size > n:
        raise BlobError(f"engine [{eng_off}, {eng_off + eng_size}) runs past the end of the "
                        f"{n}-byte blob")
    if md_off + md_size > eng_off:
        raise BlobError(f"metadata [{md_off}, {md_off + md_size}) overlaps the engine at "
                        f"offset {eng_off}")
    raw_md = data[md_off:md_off + md_size]
    if magic == MAGIC_TR03:
        _check_metadata_digest(data[HEADER_SIZE:TR03_HEADER_SIZE], raw_md)
    meta = _parse_metadata(magic, raw_md)
    engine = data[eng_off:eng_off + eng_size]
    if magic == MAGIC_TR03:
        _check_engine_digest(meta.engine_sha256, engine)
    validate(meta, magic)
    return Blob(magic=magic, metadata=meta, engine=engine)


def _check_metadata_digest(recorded: bytes, raw_md: bytes) -> None:
    got = hashlib.sha256(raw_md).digest()
    if got != recorded:
        raise BlobError(f"metadata SHA-256 mismatch: the header records {recorded.hex()}, the "
                        f"{len(raw_md)} metadata bytes hash to {got.hex()}; the blob is corrupt "
                        f"(or was written without checksums by an older torch-tensorrt-ext): "
                        f"re-export the .pte")


def _check_engine_digest(recorded: Optional[str], engine: bytes) -> None:
    if recorded is None:
        raise BlobError("metadata has no 'engine_sha256'")
    got = hashlib.sha256(engine).hexdigest()
    if got != recorded:
        raise BlobError(f"engine payload SHA-256 mismatch: the metadata records {recorded}, the "
                        f"{len(engine)} payload bytes hash to {got}; the blob is corrupt: "
                        f"re-export the .pte")


# --------------------------------------------------------------------------------------- writing

def serialize(metadata: BlobMetadata, engine: bytes) -> bytes:
    """Write a TR03 blob (validated first: an inconsistent plan never reaches a .pte)."""
    validate(metadata)
    engine = bytes(engine)
    md_dict = metadata.to_json_dict()
    md_dict["engine_sha256"] = hashlib.sha256(engine).hexdigest()
    md = json.dumps(md_dict, separators=(",", ":")).encode("utf-8")
    _parse_metadata(MAGIC_TR03, md)  # read back: nothing a reader refuses (an unpaired surrogate
    #                                  in a name, a NaN device_id) is ever written
    md_off = TR03_HEADER_SIZE
    eng_off = (md_off + len(md) + ENGINE_ALIGNMENT - 1) // ENGINE_ALIGNMENT * ENGINE_ALIGNMENT
    header = struct.pack(HEADER_FORMAT, MAGIC_TR03, md_off, len(md), eng_off, len(engine),
                         _RESERVED) + hashlib.sha256(md).digest()
    return header + md + b"\x00" * (eng_off - md_off - len(md)) + engine
