"""The `TensorRTBackend` delegate blob (docs/CONTRACTS.md §1): read TR01/TR02/TR03, write TR03.

Invariant: `parse` returns only blobs the C++ runtime (runtime/src/blob.cpp) would accept, and
`serialize` writes only blobs `parse` accepts — the same validation runs on both paths and on the
C++ side, check for check in the same order (tests/contracts/test_blob_differential.py compares
the two readers' verdicts and check ids), and anything else fails closed with a `BlobError` — never
another exception — whose `.check` is the stable id of the refusing check (blob_checks.CHECKS)
and whose message names what is wrong (the magic found, the byte range past the end, the binding
name, the two shapes that differ, ...). In
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

from .blob_checks import CHECKS, BlobError  # noqa: F401  (re-exported)
from .blob_model import (  # noqa: F401  (the data model, re-exported: one import for users)
    _RESERVED, ENGINE_ALIGNMENT, HEADER_FORMAT, HEADER_SIZE, MAGIC_TR03, MAGICS,
    KEY_PREFIX, MAX_BINDING_BYTES, TR03_HEADER_SIZE, TTE_VERSION, AliasedIO, Blob, BlobMetadata,
    BufferBinding, CopyBack, EngineData, IOBinding,
)
from .blob_metadata import parse_metadata as _parse_metadata
from .blob_validate import validate
from .dtypes import DTYPES  # noqa: F401  (re-exported)

__all__ = [
    "BlobError", "IOBinding", "AliasedIO", "BufferBinding", "CopyBack", "EngineData",
    "BlobMetadata", "Blob",
    "parse", "serialize", "validate", "CHECKS", "DTYPES", "HEADER_FORMAT", "HEADER_SIZE",
    "TR03_HEADER_SIZE", "TTE_VERSION", "MAX_BINDING_BYTES", "KEY_PREFIX",
]

# --------------------------------------------------------------------------------------- reading

def parse(data: bytes) -> Blob:
    """Parse and validate a TR01/TR02/TR03 blob; raise `BlobError` naming what is wrong. The
    engine is a read-only view of `data`, not a copy (it can be as large as the model)."""
    data = memoryview(data).cast("B")
    n = len(data)
    if n < HEADER_SIZE:
        raise BlobError(f"blob is {n} bytes, shorter than its {HEADER_SIZE}-byte header",
                        check="blob.short")
    magic, md_off, md_size, eng_off, eng_size, _ = struct.unpack(HEADER_FORMAT, data[:HEADER_SIZE])
    if magic not in MAGICS:
        raise BlobError(f"unsupported blob magic {magic!r}: this reader accepts TR01, TR02 "
                        f"and TR03", check="blob.magic")
    header = TR03_HEADER_SIZE if magic == MAGIC_TR03 else HEADER_SIZE
    if md_off < header:
        raise BlobError(f"metadata offset {md_off} lies inside the {header}-byte header",
                        check="blob.metadata_offset")
    if md_off + md_size > n:
        raise BlobError(f"metadata [{md_off}, {md_off + md_size}) runs past the end of the "
                        f"{n}-byte blob", check="blob.metadata_range")
    if eng_off % ENGINE_ALIGNMENT:
        raise BlobError(f"engine offset {eng_off} is not {ENGINE_ALIGNMENT}-byte aligned",
                        check="blob.engine_alignment")
    if eng_off + eng_size > n:
        raise BlobError(f"engine [{eng_off}, {eng_off + eng_size}) runs past the end of the "
                        f"{n}-byte blob", check="blob.engine_range")
    if md_off + md_size > eng_off:
        raise BlobError(f"metadata [{md_off}, {md_off + md_size}) overlaps the engine at "
                        f"offset {eng_off}", check="blob.overlap")
    raw_md = data[md_off:md_off + md_size]
    if magic == MAGIC_TR03:
        _check_metadata_digest(data[HEADER_SIZE:TR03_HEADER_SIZE], raw_md)
    meta = _parse_metadata(magic, bytes(raw_md))
    engine = data[eng_off:eng_off + eng_size]
    if magic == MAGIC_TR03:
        _check_engine_digest(meta.engine_sha256, engine)
        _check_no_payload(meta, engine)
    validate(meta, magic)
    return Blob(magic=magic, metadata=meta, engine=engine)


def _check_metadata_digest(recorded: bytes, raw_md: bytes) -> None:
    got = hashlib.sha256(raw_md).digest()
    if got != recorded:
        raise BlobError(f"metadata SHA-256 mismatch: the header records {recorded.hex()}, the "
                        f"{len(raw_md)} metadata bytes hash to {got.hex()}; the blob is corrupt "
                        f"(or was written without checksums by an older torch-tensorrt-ext): "
                        f"re-export the .pte", check="blob.metadata_digest")


def _check_engine_digest(recorded: str | None, engine: bytes) -> None:
    if recorded is None:
        raise BlobError("metadata has no 'engine_sha256'", check="blob.engine_digest_missing")
    got = hashlib.sha256(engine).hexdigest()
    if got != recorded:
        raise BlobError(f"engine payload SHA-256 mismatch: the metadata records {recorded}, the "
                        f"{len(engine)} payload bytes hash to {got}; the blob is corrupt: "
                        f"re-export the .pte", check="blob.engine_digest")


def _check_no_payload(meta: BlobMetadata, engine) -> None:
    if meta.engine_data is not None and len(engine):
        raise BlobError(f"a blob whose plan is named data '{meta.engine_data.key}' carries a "
                        f"{len(engine)}-byte payload; its payload is empty",
                        check="engine_data.payload")


# --------------------------------------------------------------------------------------- writing

def serialize(metadata: BlobMetadata, engine) -> bytes:
    """Write a TR03 blob (validated first: an inconsistent plan never reaches a .pte).

    `engine` is any contiguous bytes-like object (bytes, or a memoryview of a tensor's bytes):
    it is copied exactly once, into the blob — an engine the size of the weights is never held
    twice on its way in."""
    validate(metadata)
    engine = memoryview(engine).cast("B")
    _check_no_payload(metadata, engine)
    md_dict = metadata.to_json_dict()
    md_dict["engine_sha256"] = hashlib.sha256(engine).hexdigest()
    md = json.dumps(md_dict, separators=(",", ":")).encode("utf-8")
    _parse_metadata(MAGIC_TR03, md)  # read back: nothing a reader refuses (an unpaired surrogate
    #                                  in a name, a NaN device_id) is ever written
    md_off = TR03_HEADER_SIZE
    eng_off = (md_off + len(md) + ENGINE_ALIGNMENT - 1) // ENGINE_ALIGNMENT * ENGINE_ALIGNMENT
    header = struct.pack(HEADER_FORMAT, MAGIC_TR03, md_off, len(md), eng_off, len(engine),
                         _RESERVED) + hashlib.sha256(md).digest()
    return b"".join((header, md, b"\x00" * (eng_off - md_off - len(md)), engine))
