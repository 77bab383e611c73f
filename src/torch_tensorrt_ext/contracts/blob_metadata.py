"""Reading delegate blob metadata (docs/CONTRACTS.md §1) into a `BlobMetadata` — the twin of
runtime/src/blob_metadata.cpp (validating it is `blob_validate`, the twin of blob_validate.cpp).

Invariant: `parse_metadata` returns a `BlobMetadata` only for metadata the C++ runtime's reader
reads the same way — check for check, in the same order, each refusal a `BlobError` whose
`.check` is the id the C++ reader names (blob_checks.CHECKS) and whose message names the key,
binding or value; nothing else is raised (no RecursionError, ValueError). The text is read by
`blob_json.load_json` (strict JSON); an integer a typed key reads must fit int64. It builds on
`blob_model`, `blob_json`, `blob_checks`, `dtypes` and `shape_text` only.
"""
from __future__ import annotations

import json
import re
from typing import Any
from collections.abc import Sequence

from .blob_checks import BlobError
from .blob_json import load_json
from .blob_model import (
    ENGINE_KINDS, KEY_PREFIX, MAGIC_TR01, MAGIC_TR03, MAX_BINDING_BYTES, TTE_VERSIONS,
    UNKNOWN_IN_TR03, AliasedIO, BlobMetadata, BufferBinding, CopyBack, EngineData, IOBinding,
    WeightRef,
)
from .dtypes import DTYPES
from .named_key import is_named_key
from .shape_text import shape_text

__all__ = ["parse_metadata"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _is_int64(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and _INT64_MIN <= v <= _INT64_MAX


def _expect(obj: dict[str, Any], key: str, typ, where: str, default=None, required=False):
    if key not in obj:
        if required:
            raise BlobError(f"{where} has no '{key}'", check="metadata.missing")
        return default
    v = obj[key]
    ok = _is_int64(v) if typ is int else isinstance(v, typ)
    if not ok:
        shown = "int (int64)" if typ is int else getattr(typ, "__name__", typ)
        raise BlobError(f"{where}: '{key}' must be {shown}, got {json.dumps(v)[:40]}",
                        check="metadata.type")
    return v


def _names(obj: dict[str, Any], key: str) -> tuple[str, ...]:
    lst = _expect(obj, key, list, "metadata", required=True)
    for i, n in enumerate(lst):
        if not isinstance(n, str):
            raise BlobError(f"metadata: {key}[{i}] must be a binding name string",
                            check="metadata.type")
    return tuple(lst)


def _entries(obj: dict[str, Any], key: str, fields: Sequence[str],
             optional: Sequence[tuple[str, str]] = ()) -> list[tuple[str, ...]]:
    """The list `obj[key]` (absent = empty) of objects with string `fields` (and `optional`
    string fields with defaults), as tuples in field order."""
    lst = _expect(obj, key, list, "metadata", default=[])
    out = []
    for i, e in enumerate(lst):
        where = f"{key}[{i}]"
        if not isinstance(e, dict):
            raise BlobError(f"{where} must be an object", check="metadata.type")
        out.append(tuple(_expect(e, f, str, where, required=True) for f in fields)
                   + tuple(_expect(e, f, str, where, default=d) for f, d in optional))
    return out


def _shape(e: dict[str, Any], where: str) -> tuple[int, ...]:
    shape = _expect(e, "shape", list, where, required=True)
    for s in shape:
        if not _is_int64(s) or s < -1:
            raise BlobError(f"{where}: shape {json.dumps(shape)} must hold integers >= -1",
                            check="binding.shape")
    return tuple(shape)


def _unknown(dtype: str, shape: tuple[int, ...], magic: bytes, where: str) -> None:
    """dtype "" is upstream's "unknown": shape [], TR01/TR02 only."""
    if dtype:
        return
    if magic == MAGIC_TR03:
        raise BlobError(f"{where}: empty dtype; {UNKNOWN_IN_TR03}",
                        check="binding.unknown_in_tr03")
    if shape:
        raise BlobError(f"{where}: empty dtype with shape {shape_text(shape)}; a binding left "
                        f"to the delegate's tensors has dtype '' and shape []",
                        check="binding.unknown_with_shape")


def _binding(e: Any, i: int, magic: bytes) -> IOBinding:
    where = f"io_bindings[{i}]"
    if not isinstance(e, dict):
        raise BlobError(f"{where} must be an object", check="metadata.type")
    name = _expect(e, "name", str, where, required=True)
    if not name:
        raise BlobError(f"{where} has an empty name", check="binding.empty_name")
    where = f"io_bindings[{i}] '{name}'"
    dtype = _expect(e, "dtype", str, where, required=True)
    if dtype and dtype not in DTYPES:
        raise BlobError(f"{where}: unknown dtype '{dtype}' (known: {', '.join(DTYPES)})",
                        check="binding.unknown_dtype")
    shape = _shape(e, where)
    _unknown(dtype, shape, magic, where)
    is_input = _expect(e, "is_input", bool, where, required=True)
    max_shape = _max_shape(e, where) if magic == MAGIC_TR03 else ()
    return IOBinding(name, dtype, shape, is_input, max_shape)


def _max_shape(e: dict[str, Any], where: str) -> tuple[int, ...]:
    """TR03's optional upper bounds of a dynamic binding: integers >= 0."""
    bound = _expect(e, "max_shape", list, where, default=[])
    for s in bound:
        if not _is_int64(s) or s < 0:
            raise BlobError(f"{where}: max_shape {json.dumps(bound)} must hold integers >= 0",
                            check="binding.max_shape")
    return tuple(bound)


def _bindings(obj: dict[str, Any], magic: bytes) -> tuple[IOBinding, ...]:
    lst = _expect(obj, "io_bindings", list, "metadata", required=True)
    return tuple(_binding(e, i, magic) for i, e in enumerate(lst))


def _upstream_keys(obj: dict[str, Any], magic: bytes) -> dict[str, Any]:
    """Upstream's keys: the bindings, aliased_io and the engine's settings (defaults if absent)."""
    bindings = _bindings(obj, magic)
    aliased = tuple(AliasedIO(o, i, k) for o, i, k in
                    _entries(obj, "aliased_io", ("output", "input"),
                             optional=(("kind", "kv_cache_update"),)))
    if magic == MAGIC_TR01 and aliased:
        raise BlobError("TR01 blob carries aliased_io; upstream writes such blobs as TR02",
                        check="metadata.tr01_aliased")
    return dict(
        io_bindings=bindings, aliased_io=aliased,
        hardware_compatible=_expect(obj, "hardware_compatible", bool, "metadata", False),
        device_id=_expect(obj, "device_id", int, "metadata", 0),
        serialized_metadata=_expect(obj, "serialized_metadata", str, "metadata", ""),
        target_platform=_expect(obj, "target_platform", str, "metadata", ""),
    )


def _engine_kind(obj: dict[str, Any]) -> str:
    version = obj.get("tte_version")
    if not _is_int64(version) or version not in TTE_VERSIONS:  # integers: not 3.0, not True
        raise BlobError(f"TR03 blob has tte_version {json.dumps(version)}; this reader "
                        f"understands versions 3 to 5 only", check="metadata.tte_version")
    kind = _expect(obj, "engine_kind", str, "metadata", required=True)
    if kind not in ENGINE_KINDS:
        raise BlobError(f"engine_kind '{kind}' is not one of {list(ENGINE_KINDS)}",
                        check="metadata.engine_kind")
    return kind


def parse_metadata(magic: bytes, raw: bytes) -> BlobMetadata:
    """Read the metadata bytes of a blob with `magic` (not yet `validate`d)."""
    obj = load_json(raw)
    if not isinstance(obj, dict):
        raise BlobError("metadata JSON must be an object", check="metadata.root")
    common = _upstream_keys(obj, magic)
    if magic != MAGIC_TR03:
        if "tte_version" in obj:  # a TR03 blob whose magic lost its '3'
            raise BlobError(f"{magic.decode()} blob carries the TR03 key 'tte_version': its magic "
                            f"is damaged; re-export the .pte", check="metadata.damaged_magic")
        return BlobMetadata(engine_kind="tensorrt", **common)
    kind = _engine_kind(obj)
    return BlobMetadata(
        engine_kind=kind,
        delegate_inputs=_names(obj, "delegate_inputs"),
        delegate_outputs=_names(obj, "delegate_outputs"),
        buffers=tuple(BufferBinding(i, f) for i, f in
                      _entries(obj, "buffers", ("input", "fqn"))),
        copy_back=tuple(CopyBack(o, i) for o, i in
                        _entries(obj, "copy_back", ("output", "input"))),
        engine_sha256=_engine_digest(obj),
        weight_streaming_budget=_weight_streaming_budget(obj),
        weights=_weights(obj, kind),
        engine_data=_engine_data(obj, kind),
        **common)


def _weights(obj: dict[str, Any], kind: str) -> tuple[WeightRef, ...]:
    """Version 4's "weights": a reference engine's named-data weights, each a static tensor
    under a non-empty key (a key may serve two inputs: equal bytes of another dtype or shape)."""
    lst = _expect(obj, "weights", list, "metadata", default=[])
    out = []
    for i, e in enumerate(lst):
        where = f"weights[{i}]"
        if not isinstance(e, dict):
            raise BlobError(f"{where} must be an object", check="metadata.type")
        key = _expect(e, "key", str, where, required=True)
        dtype = _expect(e, "dtype", str, where, required=True)
        shape = _expect(e, "shape", list, where, required=True)
        if not key:
            raise BlobError(f"{where}: empty key; a weight is named data under a key",
                            check="weights.key")
        out.append(_weight_tensor(key, dtype, shape, where))
    if out and kind != "reference":
        raise BlobError(f"a {kind} engine carries its weights in its plan; 'weights' is for "
                        "reference engines only", check="weights.engine_kind")
    return tuple(out)


def _engine_data(obj: dict[str, Any], kind: str) -> EngineData | None:
    """Version 5's "engine_data": a TensorRT plan's named-data key (the plan's SHA-256, which the
    runtime checks before deserializing) and byte size."""
    e = _expect(obj, "engine_data", dict, "metadata")
    if e is None:
        return None
    key = _expect(e, "key", str, "engine_data", required=True)
    nbytes = _expect(e, "nbytes", int, "engine_data", required=True)
    if not is_named_key(key):
        raise BlobError(f"engine_data: key {json.dumps(key)[:90]} is not '{KEY_PREFIX}' and the "
                        "64 lowercase hex digits of the plan's SHA-256", check="engine_data.key")
    if nbytes < 1:
        raise BlobError(f"engine_data: nbytes {nbytes} is not a plan's size (at least 1 byte)",
                        check="engine_data.nbytes")
    if kind == "reference":
        raise BlobError("a reference engine's program is its payload; 'engine_data' is for "
                        "TensorRT plans only", check="engine_data.engine_kind")
    return EngineData(key, nbytes)


def _weight_tensor(key: str, dtype: str, shape: list, where: str) -> WeightRef:
    n = DTYPES.get(dtype, 0)
    ok = n > 0 and all(_is_int64(s) and s >= 0 for s in shape)
    for s in shape if ok else ():
        n *= s
    if not ok or n > MAX_BINDING_BYTES:
        raise BlobError(f"{where} '{key}': {json.dumps(dtype)} {json.dumps(shape)[:60]} is not a "
                        "static tensor of a known dtype within 2**63-1 bytes",
                        check="weights.tensor")
    return WeightRef(key, dtype, tuple(shape))


def _weight_streaming_budget(obj: dict[str, Any]) -> int | None:
    v = obj.get("weight_streaming_budget")
    if v is None and "weight_streaming_budget" not in obj:
        return None
    if not _is_int64(v) or v < 0:
        raise BlobError("metadata: 'weight_streaming_budget' must be a non-negative integer "
                        f"(bytes of engine weights kept on the device), got {json.dumps(v)[:40]}",
                        check="metadata.weight_streaming_budget")
    return v


_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


def _engine_digest(obj: dict[str, Any]) -> str | None:
    """TR03's engine digest; optional here (a signature carries metadata without a payload),
    required by `blob.parse` once the metadata is read."""
    v = _expect(obj, "engine_sha256", str, "metadata")
    if v is not None and not _HEX_DIGEST.fullmatch(v):
        raise BlobError(f"metadata: 'engine_sha256' must be 64 lowercase hex digits (the SHA-256 "
                        f"of the engine payload), got {json.dumps(v)[:40]}",
                        check="metadata.engine_sha256")
    return v
