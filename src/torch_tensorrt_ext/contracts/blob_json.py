"""Strict JSON for delegate blob metadata (docs/CONTRACTS.md §1), read with python's `json`.

Invariant: `load_json` returns the value of the metadata bytes exactly when the C++ runtime's
reader (runtime/src/blob_json.cpp, nlohmann/json) accepts them as strict JSON the blob contract
allows; otherwise it raises `BlobError` — never another exception (no RecursionError,
ValueError) — under one of the same check ids: json.utf8 (the whole text is decoded first),
json.syntax, json.non_finite (NaN, Infinity, -Infinity, or a number that overflows a double),
json.duplicate_key, json.depth (an array or object opened inside MAX_NESTING others),
json.surrogate (an unpaired surrogate escape), json.nul (a string holding NUL). A text with one
defect is refused under the id the C++ reader names. With several, the C++ reader names the
first in document order; this reader names the first `json.loads` meets, then depth, surrogate
and NUL on the parsed value — the only difference between the two readers (measured
by scripts/blob_json_order_probe.py over the differential corpus, 17 of 3,416 refused blobs,
0 accept/refuse differences; emulating the C++ order cost ~150 lines). Integers are python's:
the typed reads (blob_metadata) hold them to int64.
"""
from __future__ import annotations

import json
import math
from typing import Any
from collections.abc import Sequence

from .blob_checks import BlobError

__all__ = ["load_json", "MAX_NESTING"]

# Arrays and objects nest at most this deep (the root container is depth 1), as blob_json.cpp.
MAX_NESTING = 64


def _non_finite(text: str) -> BlobError:
    return BlobError(f"metadata JSON holds the non-finite number {text}; numbers must be finite",
                     check="json.non_finite")


def _refuse_constant(name: str):
    raise _non_finite(name)  # NaN, Infinity, -Infinity


def _float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise _non_finite(text)
    return v


def _int(text: str) -> int:
    if not math.isfinite(float(text)):  # also keeps int() off texts past its digit limit
        raise _non_finite(text)
    return int(text)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise BlobError(f"metadata JSON has the key '{key}' twice in one object",
                            check="json.duplicate_key")
        seen.add(key)
    return dict(pairs)


def _syntax_error(text: str, pos: int, msg: str) -> BlobError:
    at = len(text[:pos].encode("utf-8"))  # a byte offset, as the blob's bytes count
    return BlobError(f"metadata JSON is truncated or malformed at byte {at}: {msg}",
                     check="json.syntax")


def _too_deep() -> BlobError:
    return BlobError(f"metadata JSON nests arrays and objects deeper than {MAX_NESTING}",
                     check="json.depth")


def load_json(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BlobError(f"metadata is not UTF-8 at byte {e.start}", check="json.utf8") from None
    try:
        obj = json.loads(text, object_pairs_hook=_object, parse_constant=_refuse_constant,
                         parse_float=_float, parse_int=_int)
    except json.JSONDecodeError as e:
        raise _syntax_error(text, e.pos, e.msg) from None
    except RecursionError:  # deeper than python's own stack allows: far past MAX_NESTING
        raise _too_deep() from None
    if _depth(obj) > MAX_NESTING:
        raise _too_deep()
    _refuse_surrogates(obj)
    _refuse_nul(obj)
    return obj


def _depth(value: Any) -> int:
    """How deep arrays and objects nest in a parsed value (the root container is depth 1)."""
    stack, deepest = [(value, 1)], 0
    while stack:
        x, d = stack.pop()
        if isinstance(x, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in (x.values() if isinstance(x, dict) else x))
    return deepest


def _first_nul_string(obj: Any) -> str | None:
    """The first string (key or value, in document order) holding a NUL character."""
    if isinstance(obj, str):
        return obj if "\0" in obj else None
    items: Sequence[Any] = ()
    if isinstance(obj, dict):
        items = [x for kv in obj.items() for x in kv]
    elif isinstance(obj, list):
        items = obj
    for x in items:
        found = _first_nul_string(x)
        if found is not None:
            return found
    return None


def _refuse_nul(obj: Any) -> None:
    """The C++ reader compares names as C strings in places: no reader accepts a NUL in one."""
    s = _first_nul_string(obj)
    if s is not None:
        raise BlobError(f"metadata JSON holds a NUL character (\\u0000) in the string "
                        f"{json.dumps(s)[:60]}; strings must not contain NUL", check="json.nul")


def _refuse_surrogates(obj: Any) -> None:
    """json.loads keeps an unpaired surrogate escape (\\ud800) in the string; no reader accepts
    one. Refuse the first one in document order."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise BlobError(f"metadata JSON holds the unpaired surrogate escape "
                        f"\\u{ord(e.object[e.start]):04x}; strings must be valid Unicode",
                        check="json.surrogate") from None
