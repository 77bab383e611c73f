"""Strict JSON for delegate blob metadata (docs/CONTRACTS.md §1): what the C++ runtime's reader
(runtime/src/json.cpp) accepts, read the way it reads it.

Invariant: `load_json` returns the value of metadata bytes exactly when the C++ reader accepts
them, and otherwise raises `BlobError` — never another exception (no RecursionError, no
ValueError) — with the C++ reader's message (a syntax error placed at the same byte). Beyond what
`json.loads` refuses, the bytes must be valid UTF-8 and the JSON must nest at most MAX_NESTING
levels (refused where the deeper value starts, without recursing past it) and hold no duplicate
key in an object, no non-finite number (NaN, Infinity, a number that overflows a double), no
unpaired surrogate escape and no NUL in a string; an integer outside int64 reads as the float the
C++ reader makes of it.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .blob_model import BlobError

__all__ = ["load_json", "MAX_NESTING"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _non_finite(text: str) -> BlobError:
    return BlobError(f"metadata JSON holds the non-finite number {text}; numbers must be finite")


def _refuse_constant(name: str):
    raise _non_finite(name)  # NaN, Infinity, -Infinity


def _float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise _non_finite(text)
    return v


def _int(text: str):
    # The C++ reader keeps an integer only within int64; beyond, it is the double of the text.
    if len(text) - text.startswith("-") <= 19:
        v = int(text)
        if _INT64_MIN <= v <= _INT64_MAX:
            return v
    return _float(text)


def _object(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise BlobError(f"metadata JSON has the key '{key}' twice in one object")
        seen.add(key)
    return dict(pairs)


def _syntax_error(text: str, pos: int, msg: str) -> BlobError:
    at = len(text[:pos].encode("utf-8"))  # a byte offset, as the C++ reader counts
    return BlobError(f"metadata JSON is truncated or malformed at byte {at}: {msg}")


def load_json(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BlobError(f"metadata is not UTF-8 at byte {e.start}") from None
    # json.loads recurses per level; the C++ reader refuses a value nested deeper than
    # MAX_NESTING levels where it starts. Parse only the text before that point, so an earlier
    # defect is still reported first, and never recurse deeper than the limit.
    deep = _too_deep_at(text)
    try:
        obj = json.loads(text if deep is None else text[:deep], object_pairs_hook=_object,
                         parse_constant=_refuse_constant, parse_float=_float, parse_int=_int)
    except json.JSONDecodeError as e:
        if deep is None or e.pos < deep:
            raise _syntax_error(text, e.pos, e.msg) from None
    except RecursionError:  # not reachable with the cut above; never let it escape as such
        raise _syntax_error(text, 0, f"nesting deeper than {MAX_NESTING} levels") from None
    if deep is not None:
        raise _syntax_error(text, deep, f"nesting deeper than {MAX_NESTING} levels")
    _refuse_surrogates(obj)
    _refuse_nul(obj)
    return obj


# Nesting levels of JSON values the readers accept (the root is level 1), as json.cpp's kMaxDepth.
MAX_NESTING = 64
_WS = " \t\n\r"
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SCALAR_END = re.compile(r'[\s,:\[\]{}"]')


def _too_deep_at(text: str) -> Optional[int]:
    """The index where a value nested deeper than MAX_NESTING levels starts (after the
    whitespace before it), where the C++ reader refuses it; None when there is none. Exact on a
    valid JSON prefix; on malformed text it may stop early (returning None), and json.loads then
    reports the defect, which lies before any such value."""
    if text.count("[") + text.count("{") < MAX_NESTING:
        return None
    stack: List[bool] = []  # True: an object
    state, empty_ok, i, n = "value", False, 0, len(text)
    while i < n:
        c = text[i]
        if c in _WS:
            i += 1
        elif state == "value":
            if c in "]}" and empty_ok and c == ("}" if stack[-1] else "]"):
                stack.pop()
                state, i = "after", i + 1
            elif len(stack) >= MAX_NESTING:
                return i
            elif c in "[{":
                stack.append(c == "{")
                state, empty_ok, i = ("key" if c == "{" else "value"), True, i + 1
            elif c == '"':
                m = _STRING.match(text, i)
                if m is None:
                    return None
                state, i = "after", m.end()
            elif c in "]},:":
                return None
            else:
                m = _SCALAR_END.search(text, i + 1)
                state, i = "after", (m.start() if m else n)
        elif state == "key":
            if c == "}" and empty_ok:
                stack.pop()
                state, i = "after", i + 1
                continue
            m = _STRING.match(text, i) if c == '"' else None
            if m is None:
                return None
            state, i = "colon", m.end()
        elif state == "colon":
            if c != ":":
                return None
            state, empty_ok, i = "value", False, i + 1
        else:  # after a value
            if not stack:
                return None
            if c == ",":
                state, empty_ok, i = ("key" if stack[-1] else "value"), False, i + 1
            elif c == ("}" if stack[-1] else "]"):
                stack.pop()
                i += 1
            else:
                return None
    return None


def _first_nul_string(obj: Any) -> Optional[str]:
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
                        f"{json.dumps(s)[:60]}; strings must not contain NUL")


def _refuse_surrogates(obj: Any) -> None:
    """json.loads keeps an unpaired surrogate escape (\\ud800) in the string; the C++ reader
    cannot hold it in UTF-8. Refuse the first one in document order."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise BlobError(f"metadata JSON holds the unpaired surrogate escape "
                        f"\\u{ord(e.object[e.start]):04x}; strings must be valid Unicode") \
            from None
