"""Strict JSON for delegate blob metadata (docs/CONTRACTS.md §1), read with python's `json`.

Invariant: `load_json` returns the value of the metadata bytes when they are strict JSON the blob
contract allows; otherwise it raises `BlobError` — never another exception (no RecursionError,
ValueError) — for the first defect in document order, with the check id the C++ runtime's reader
(runtime/src/blob_json.cpp, nlohmann/json) names for the same text: json.utf8 (the whole text is
decoded first), json.syntax, json.depth (an array or object opened inside MAX_NESTING others),
json.non_finite (NaN, Infinity, -Infinity, or a number that overflows a double), json.surrogate
(an unpaired surrogate escape), json.duplicate_key (reported when its object closes); then
json.nul (a string holding NUL, once the whole text parsed). Where the text holds a too-deep
container or an unpaired surrogate, only the text before it (before the surrogate's string) is
parsed: an earlier defect is still reported first, and json.loads never recurses past the limit.
Integers are python's: the typed reads (blob_validate) hold them to int64.
"""
from __future__ import annotations

import json
import math
import re
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


def load_json(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BlobError(f"metadata is not UTF-8 at byte {e.start}", check="json.utf8") from None
    cut, refusal = _first_cut(text)
    try:
        obj = json.loads(text if cut is None else text[:cut], object_pairs_hook=_object,
                         parse_constant=_refuse_constant, parse_float=_float, parse_int=_int)
    except json.JSONDecodeError as e:
        if cut is None or e.pos < cut:
            raise _syntax_error(text, e.pos, e.msg) from None
        obj = None
    except RecursionError:  # not reachable with the cut; never let it escape as such
        raise BlobError(f"metadata JSON nests deeper than {MAX_NESTING} levels",
                        check="json.depth") from None
    if refusal is not None:
        raise refusal
    _refuse_surrogates(obj)  # a net under _unpaired_surrogate_at: never accept one
    _refuse_nul(obj)
    return obj


def _first_cut(text: str) -> tuple[int | None, BlobError | None]:
    """Where parsing must stop, and why: the first too-deep container or string holding an
    unpaired surrogate escape, whichever starts first; (None, None) when there is neither."""
    deep = _too_deep_at(text)
    surrogate = _unpaired_surrogate_at(text)
    if surrogate is not None and (deep is None or surrogate[0] < deep):
        return surrogate[0], BlobError(
            f"metadata JSON holds the unpaired surrogate escape {surrogate[1]}; strings must be "
            f"valid Unicode", check="json.surrogate")
    if deep is not None:
        return deep, _syntax_depth(text, deep)
    return None, None


def _syntax_depth(text: str, at: int) -> BlobError:
    return BlobError(f"metadata JSON nests arrays and objects deeper than {MAX_NESTING} at byte "
                     f"{len(text[:at].encode('utf-8'))}", check="json.depth")


_WS = " \t\n\r"
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SCALAR_END = re.compile(r'[\s,:\[\]{}"]')


class _Nesting:
    """A walk over a JSON text's structure (strings skipped whole), to the first container
    opened inside MAX_NESTING others. Exact on a valid JSON prefix; on malformed text it may
    stop early (None), and json.loads then reports the defect, which lies before any such
    container."""

    def __init__(self, text: str) -> None:
        self.text, self.stack, self.empty_ok = text, [], False  # stack: True for an object

    def run(self) -> int | None:
        state, i, n = "value", 0, len(self.text)
        while i < n:
            if self.text[i] in _WS:
                i += 1
                continue
            step = getattr(self, "_" + state)(i)
            if step is None or step[0] == "deep":
                return None if step is None else step[1]
            state, i = step
        return None

    def _value(self, i: int):
        c = self.text[i]
        if c in "]}" and self.empty_ok and c == ("}" if self.stack[-1] else "]"):
            self.stack.pop()
            return "after", i + 1
        if c in "[{":
            if len(self.stack) >= MAX_NESTING:
                return "deep", i
            self.stack.append(c == "{")
            self.empty_ok = True
            return ("key" if c == "{" else "value"), i + 1
        if c == '"':
            m = _STRING.match(self.text, i)
            return None if m is None else ("after", m.end())
        if c in "]},:":
            return None
        m = _SCALAR_END.search(self.text, i + 1)
        return "after", (m.start() if m else len(self.text))

    def _key(self, i: int):
        if self.text[i] == "}" and self.empty_ok:
            self.stack.pop()
            return "after", i + 1
        m = _STRING.match(self.text, i) if self.text[i] == '"' else None
        return None if m is None else ("colon", m.end())

    def _colon(self, i: int):
        if self.text[i] != ":":
            return None
        self.empty_ok = False
        return "value", i + 1

    def _after(self, i: int):
        c = self.text[i]
        if not self.stack:
            return None
        if c == ",":
            self.empty_ok = False
            return ("key" if self.stack[-1] else "value"), i + 1
        if c == ("}" if self.stack[-1] else "]"):
            self.stack.pop()
            return "after", i + 1
        return None


def _too_deep_at(text: str) -> int | None:
    """The index of the first array or object opened inside MAX_NESTING others, or None."""
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return None
    return _Nesting(text).run()


# Inside a string: a quote, a backslash or a control character (where the plain run stops).
_STRING_STOP = re.compile(r'["\\\x00-\x1f]')
_ESCAPE = re.compile(r'\\(?:u([0-9a-fA-F]{4})|["\\/bfnrt])')


def _unpaired_surrogate_at(text: str) -> tuple[int, str] | None:
    """(index of its string's opening quote, the escape) of the first unpaired UTF-16 surrogate
    escape, looking only at strings that are valid up to it (a defect earlier in a string is a
    syntax error json.loads reports); None when there is none."""
    quote = text.find('"')
    while quote != -1:
        end, escape = _scan_string(text, quote)
        if escape is not None:
            return quote, escape
        if end is None:
            return None
        quote = text.find('"', end)
    return None


def _scan_string(text: str, quote: int) -> tuple[int | None, str | None]:
    """The string opening at `quote`: (the index after it, None), or (None, the first unpaired
    surrogate escape in it), or (None, None) when it is invalid before either."""
    i = quote + 1
    while True:
        stop = _STRING_STOP.search(text, i)
        if stop is None or text[stop.start()] < " ":
            return None, None  # unterminated, or a control character: a syntax error
        i = stop.start()
        if text[i] == '"':
            return i + 1, None
        m = _ESCAPE.match(text, i)
        if m is None:
            return None, None  # an invalid escape
        i = m.end()
        if m.group(1) is None:
            continue
        cp = int(m.group(1), 16)
        if 0xDC00 <= cp <= 0xDFFF:
            return None, m.group(0)
        if 0xD800 <= cp <= 0xDBFF:
            if not text.startswith("\\u", i):
                return None, m.group(0)
            low = _ESCAPE.match(text, i)
            if low is None or low.group(1) is None:
                return None, None  # '\u' without four hex digits
            if not 0xDC00 <= int(low.group(1), 16) <= 0xDFFF:
                return None, m.group(0)
            i = low.end()


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
