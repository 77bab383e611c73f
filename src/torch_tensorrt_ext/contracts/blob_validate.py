"""Reading and validating delegate blob metadata (docs/CONTRACTS.md §1), for `blob.parse`,
`blob.serialize` and the engines that check a plan before it is written.

Invariant: `parse_metadata` returns a `BlobMetadata` only for metadata the C++ runtime's reader
(runtime/src/blob.cpp, json.cpp) reads the same way, and `validate` accepts exactly what the C++
`validate_blob` accepts — check for check and, as far as the languages allow, message for
message; everything else raises `BlobError` (and nothing else: no RecursionError, ValueError)
naming the key, binding or value. The metadata text is read by `blob_json.load_json` (strict
JSON as the C++ reader reads it); a binding larger than 2**63-1 bytes is refused.
It builds on `blob_model` and `blob_json` only; `blob` builds on it.
"""
from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .blob_model import (
    DTYPES, ENGINE_KINDS, MAGIC_TR01, MAGIC_TR03, MAX_BINDING_BYTES, TTE_VERSION, AliasedIO,
    BlobError, BlobMetadata, BufferBinding, CopyBack, IOBinding,
)
from .blob_json import load_json

__all__ = ["validate", "parse_metadata"]


# ----------------------------------------------------------------------------------- validation

def _shape_text(shape: Sequence[int]) -> str:
    return f"[{','.join(str(s) for s in shape)}]"


def _shape_str(b: IOBinding) -> str:
    return f"{b.dtype} {_shape_text(b.shape)}" if b.known else "unknown"


_UNKNOWN_IN_TR03 = ("only upstream TR01/TR02 blobs may leave a binding's dtype and shape to the "
                    "delegate's tensors (dtype '' and shape []); a TR03 blob must give both")


def _fits(b: IOBinding) -> bool:
    """Its static dims times its element size are at most MAX_BINDING_BYTES (the C++ reader's
    size_t arithmetic must not wrap)."""
    if not b.known:
        return True
    n = DTYPES[b.dtype]
    for s in b.shape:
        if s >= 0:
            n *= s
            if n > MAX_BINDING_BYTES:
                return False
    return True


def _record_writer(writer_of: Dict[str, str], inp: str, out: str) -> None:
    """An input binding is written by at most one output (aliased or copy-back)."""
    if inp in writer_of:
        raise BlobError(f"input binding '{inp}' is written by both '{writer_of[inp]}' and '{out}'")
    writer_of[inp] = out


def validate(meta: BlobMetadata, magic: bytes = MAGIC_TR03) -> None:
    """Raise `BlobError` unless `meta` is self-consistent (CONTRACTS.md §1, "Validation") as a
    blob with `magic` (TR03, what `serialize` writes, refuses unknown bindings)."""
    by_name: Dict[str, IOBinding] = {}
    for b in meta.io_bindings:
        if b.name in by_name:
            raise BlobError(f"binding name '{b.name}' appears twice in io_bindings")
        by_name[b.name] = b
        if magic == MAGIC_TR03 and not b.known:
            raise BlobError(f"binding '{b.name}' has an empty dtype; {_UNKNOWN_IN_TR03}")
        if not _fits(b):
            raise BlobError(f"binding '{b.name}' ({_shape_str(b)}) is larger than 2**63-1 bytes")

    def need(name: str, want_input: bool, where: str) -> IOBinding:
        b = by_name.get(name)
        kind = "input" if want_input else "output"
        if b is None:
            raise BlobError(f"{where} names {kind} '{name}', which is not a binding")
        if b.is_input != want_input:
            raise BlobError(f"{where} names {kind} '{name}', which is an "
                            f"{'input' if b.is_input else 'output'} binding")
        return b

    def same_type(out: IOBinding, inp: IOBinding, what: str) -> None:
        if out.known != inp.known or out.dtype != inp.dtype or \
                tuple(out.shape) != tuple(inp.shape):
            raise BlobError(f"{what} pair '{out.name}' -> '{inp.name}' differs: output is "
                            f"{_shape_str(out)}, input is {_shape_str(inp)}")

    writer_of: Dict[str, str] = {}  # input binding -> the output writing into it
    aliased = set()
    for i, a in enumerate(meta.aliased_io):
        out = need(a.output, False, f"aliased_io[{i}]")
        inp = need(a.input, True, f"aliased_io[{i}]")
        if out.known and inp.known:  # else: the runtime compares the two tensors at execute
            same_type(out, inp, "aliased")
        if a.output in aliased:
            raise BlobError(f"output binding '{a.output}' is aliased twice in aliased_io")
        aliased.add(a.output)
        _record_writer(writer_of, a.input, a.output)

    if meta.engine_kind not in ENGINE_KINDS:
        raise BlobError(f"engine_kind '{meta.engine_kind}' is not one of {list(ENGINE_KINDS)}")

    seen = set()
    for i, name in enumerate(meta.delegate_inputs):
        need(name, True, f"delegate_inputs[{i}]")
        if name in seen:
            raise BlobError(f"delegate_inputs lists input binding '{name}' twice")
        seen.add(name)
    for name in meta.input_names:
        if name not in seen:
            raise BlobError(f"delegate_inputs misses input binding '{name}' (every input binding "
                            f"must be a delegate argument)")
    delegate_outs = set()
    for i, name in enumerate(meta.delegate_outputs):
        need(name, False, f"delegate_outputs[{i}]")
        if name in delegate_outs:
            raise BlobError(f"delegate_outputs lists output binding '{name}' twice")
        delegate_outs.add(name)

    fqns: Dict[str, str] = {}
    buffer_inputs = set()
    for i, buf in enumerate(meta.buffers):
        need(buf.input, True, f"buffers[{i}]")
        if not buf.fqn:
            raise BlobError(f"buffers[{i}] has an empty fqn for input '{buf.input}'")
        if buf.input in buffer_inputs:
            raise BlobError(f"buffers lists input binding '{buf.input}' twice")
        if buf.fqn in fqns:
            raise BlobError(f"buffer '{buf.fqn}' is bound to both '{fqns[buf.fqn]}' and "
                            f"'{buf.input}'")
        buffer_inputs.add(buf.input)
        fqns[buf.fqn] = buf.input

    copied = set()
    for i, c in enumerate(meta.copy_back):
        out = need(c.output, False, f"copy_back[{i}]")
        inp = need(c.input, True, f"copy_back[{i}]")
        same_type(out, inp, "copy_back")
        if c.output in aliased:
            raise BlobError(f"output binding '{c.output}' is both aliased and copy-back")
        if c.output in copied:
            raise BlobError(f"copy_back lists output binding '{c.output}' twice")
        copied.add(c.output)
        _record_writer(writer_of, c.input, c.output)
        if c.output not in delegate_outs and any(s < 0 for s in out.shape):
            raise BlobError(f"copy-back output '{c.output}' has a dynamic shape "
                            f"{_shape_text(out.shape)}; the runtime needs a static one for its "
                            f"scratch")

    for name in meta.output_names:
        if name not in delegate_outs and name not in aliased and name not in copied:
            raise BlobError(f"output binding '{name}' is neither a delegate output, aliased "
                            f"(aliased_io) nor copy-back (copy_back): its value would be dropped")


# --------------------------------------------------------------------------------------- reading

def _expect(obj: Dict[str, Any], key: str, typ, where: str, default=None, required=False):
    if key not in obj:
        if required:
            raise BlobError(f"{where} has no '{key}'")
        return default
    v = obj[key]
    ok = isinstance(v, typ) and not (typ is int and isinstance(v, bool))
    if not ok:
        raise BlobError(f"{where}: '{key}' must be {getattr(typ, '__name__', typ)}, got "
                        f"{json.dumps(v)[:40]}")
    return v


def _names(obj: Dict[str, Any], key: str) -> Tuple[str, ...]:
    lst = _expect(obj, key, list, "metadata", required=True)
    for i, n in enumerate(lst):
        if not isinstance(n, str):
            raise BlobError(f"metadata: {key}[{i}] must be a binding name string")
    return tuple(lst)


def _entries(obj: Dict[str, Any], key: str, fields: Sequence[str],
             optional: Sequence[Tuple[str, str]] = ()) -> List[Tuple[str, ...]]:
    """The list `obj[key]` (absent = empty) of objects with string `fields` (and `optional`
    string fields with defaults), as tuples in field order."""
    lst = _expect(obj, key, list, "metadata", default=[])
    out = []
    for i, e in enumerate(lst):
        where = f"{key}[{i}]"
        if not isinstance(e, dict):
            raise BlobError(f"{where} must be an object")
        out.append(tuple(_expect(e, f, str, where, required=True) for f in fields)
                   + tuple(_expect(e, f, str, where, default=d) for f, d in optional))
    return out


def _bindings(obj: Dict[str, Any], magic: bytes) -> Tuple[IOBinding, ...]:
    lst = _expect(obj, "io_bindings", list, "metadata", required=True)
    out = []
    for i, e in enumerate(lst):
        where = f"io_bindings[{i}]"
        if not isinstance(e, dict):
            raise BlobError(f"{where} must be an object")
        name = _expect(e, "name", str, where, required=True)
        if not name:
            raise BlobError(f"{where} has an empty name")
        where = f"io_bindings[{i}] '{name}'"
        dtype = _expect(e, "dtype", str, where, required=True)
        if dtype and dtype not in DTYPES:
            raise BlobError(f"{where}: unknown dtype '{dtype}' (known: {', '.join(DTYPES)})")
        shape = _expect(e, "shape", list, where, required=True)
        for s in shape:
            if not isinstance(s, int) or isinstance(s, bool) or s < -1:
                raise BlobError(f"{where}: shape {json.dumps(shape)} must hold integers >= -1")
        if not dtype:  # upstream's "unknown": dtype "" and shape [], TR01/TR02 only
            if magic == MAGIC_TR03:
                raise BlobError(f"{where}: empty dtype; {_UNKNOWN_IN_TR03}")
            if shape:
                raise BlobError(f"{where}: empty dtype with shape {_shape_text(shape)}; a binding "
                                f"left to the delegate's tensors has dtype '' and shape []")
        is_input = _expect(e, "is_input", bool, where, required=True)
        out.append(IOBinding(name, dtype, tuple(shape), is_input))
    return tuple(out)


def parse_metadata(magic: bytes, raw: bytes) -> BlobMetadata:
    """Read the metadata bytes of a blob with `magic` (not yet `validate`d)."""
    obj = load_json(raw)
    if not isinstance(obj, dict):
        raise BlobError("metadata JSON must be an object")
    bindings = _bindings(obj, magic)
    aliased = tuple(AliasedIO(o, i, k) for o, i, k in
                    _entries(obj, "aliased_io", ("output", "input"),
                             optional=(("kind", "kv_cache_update"),)))
    if magic == MAGIC_TR01 and aliased:
        raise BlobError("TR01 blob carries aliased_io; upstream writes such blobs as TR02")
    common = dict(
        io_bindings=bindings, aliased_io=aliased,
        hardware_compatible=_expect(obj, "hardware_compatible", bool, "metadata", False),
        device_id=_expect(obj, "device_id", int, "metadata", 0),
        serialized_metadata=_expect(obj, "serialized_metadata", str, "metadata", ""),
        target_platform=_expect(obj, "target_platform", str, "metadata", ""),
    )
    if magic != MAGIC_TR03:
        if "tte_version" in obj:  # a TR03 blob whose magic lost its '3'
            raise BlobError(f"{magic.decode()} blob carries the TR03 key 'tte_version': its magic "
                            f"is damaged; re-export the .pte")
        return BlobMetadata(engine_kind="tensorrt", **common)
    version = obj.get("tte_version")
    if type(version) is not int or version != TTE_VERSION:  # the integer 3: not 3.0, not True
        raise BlobError(f"TR03 blob has tte_version {json.dumps(version)}; this reader "
                        f"understands version {TTE_VERSION} only")
    return BlobMetadata(
        engine_kind=_expect(obj, "engine_kind", str, "metadata", required=True),
        delegate_inputs=_names(obj, "delegate_inputs"),
        delegate_outputs=_names(obj, "delegate_outputs"),
        buffers=tuple(BufferBinding(i, f) for i, f in
                      _entries(obj, "buffers", ("input", "fqn"))),
        copy_back=tuple(CopyBack(o, i) for o, i in
                        _entries(obj, "copy_back", ("output", "input"))),
        engine_sha256=_engine_digest(obj),
        **common)


_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


def _engine_digest(obj: Dict[str, Any]) -> Optional[str]:
    """TR03's engine digest; optional here (a signature carries metadata without a payload),
    required by `blob.parse` once the metadata is read."""
    v = _expect(obj, "engine_sha256", str, "metadata")
    if v is not None and not _HEX_DIGEST.fullmatch(v):
        raise BlobError(f"metadata: 'engine_sha256' must be 64 lowercase hex digits (the SHA-256 "
                        f"of the engine payload), got {json.dumps(v)[:40]}")
    return v
