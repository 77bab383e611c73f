"""The `TensorRTBackend` delegate blob (docs/CONTRACTS.md §1): read TR01/TR02/TR03, write TR03.

Invariant: `parse` returns only blobs the C++ runtime (runtime/src/blob.cpp) would accept, and
`serialize` writes only blobs `parse` accepts — the same validation runs on both paths and on the
C++ side, and anything else fails closed with a `BlobError` that names what is wrong (the magic
found, the byte range past the end, the binding name, the two shapes that differ, ...). In
particular every engine output is accounted for: a delegate output, an aliased output written in
place through its input, or a copy-back output; a write is never silently dropped.

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

import json
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..engines.info import AliasedIO  # one definition for the engine interface and the blob

__all__ = [
    "BlobError", "IOBinding", "AliasedIO", "BufferBinding", "CopyBack", "BlobMetadata", "Blob",
    "parse", "serialize", "DTYPES", "HEADER_FORMAT", "HEADER_SIZE", "TTE_VERSION",
]

HEADER_FORMAT = "<4sIIIQ8s"
HEADER_SIZE = struct.calcsize(HEADER_FORMAT)  # 32
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


class BlobError(ValueError):
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


# ----------------------------------------------------------------------------------- validation

def _shape_text(shape: Sequence[int]) -> str:
    return f"[{','.join(str(s) for s in shape)}]"


def _shape_str(b: IOBinding) -> str:
    return f"{b.dtype} {_shape_text(b.shape)}" if b.known else "unknown"


_UNKNOWN_IN_TR03 = ("only upstream TR01/TR02 blobs may leave a binding's dtype and shape to the "
                    "delegate's tensors (dtype '' and shape []); a TR03 blob must give both")


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
        if a.input in writer_of:
            raise BlobError(f"input binding '{a.input}' is written by both '{writer_of[a.input]}'"
                            f" and '{a.output}'")
        writer_of[a.input] = a.output

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
        if c.input in writer_of:
            raise BlobError(f"input binding '{c.input}' is written by both '{writer_of[c.input]}'"
                            f" and '{c.output}'")
        writer_of[c.input] = c.output
        if c.output not in delegate_outs and any(s < 0 for s in out.shape):
            raise BlobError(f"copy-back output '{c.output}' has a dynamic shape "
                            f"{list(out.shape)}; the runtime needs a static one for its scratch")

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


def _parse_metadata(magic: bytes, raw: bytes) -> BlobMetadata:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BlobError(f"metadata is not UTF-8 at byte {e.start}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise BlobError(f"metadata JSON is truncated or malformed at byte {e.pos}: {e.msg}") \
            from None
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
        return BlobMetadata(engine_kind="tensorrt", **common)
    version = obj.get("tte_version")
    if version != TTE_VERSION:
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
        **common)


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
    if md_off < HEADER_SIZE:
        raise BlobError(f"metadata offset {md_off} lies inside the {HEADER_SIZE}-byte header")
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
    meta = _parse_metadata(magic, data[md_off:md_off + md_size])
    validate(meta, magic)
    return Blob(magic=magic, metadata=meta, engine=data[eng_off:eng_off + eng_size])


# --------------------------------------------------------------------------------------- writing

def serialize(metadata: BlobMetadata, engine: bytes) -> bytes:
    """Write a TR03 blob (validated first: an inconsistent plan never reaches a .pte)."""
    validate(metadata)
    md = json.dumps(metadata.to_json_dict(), separators=(",", ":")).encode("utf-8")
    md_off = HEADER_SIZE
    eng_off = (md_off + len(md) + ENGINE_ALIGNMENT - 1) // ENGINE_ALIGNMENT * ENGINE_ALIGNMENT
    header = struct.pack(HEADER_FORMAT, MAGIC_TR03, md_off, len(md), eng_off, len(engine),
                         _RESERVED)
    return header + md + b"\x00" * (eng_off - md_off - len(md)) + bytes(engine)


def binding_list(specs: Sequence[Tuple[str, str, Sequence[int], bool]]) -> List[IOBinding]:
    """Convenience: [(name, dtype, shape, is_input), ...] -> IOBindings."""
    return [IOBinding(n, d, tuple(s), i) for n, d, s, i in specs]
