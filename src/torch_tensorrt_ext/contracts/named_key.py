"""The named-data key of bytes a blob names — a reference engine's weight, a TensorRT plan:
`tte/sha256/` and the 64 lowercase hex digits of the bytes' SHA-256 (docs/CONTRACTS.md §1; the
C++ reader is `named_key_digest` in runtime/src/blob.h).

Invariant: `named_key(data)` is the package's one builder of such a key and `key_digest(key)`
its one reader — the 32-byte digest the key names, or None for a string that is not such a key
(`is_named_key`: the same as a bool). Equal bytes get equal keys, so the file holds them once.
"""
from __future__ import annotations

import hashlib
import re

__all__ = ["KEY_PREFIX", "named_key", "key_digest", "is_named_key"]

KEY_PREFIX = "tte/sha256/"
_KEY = re.compile(re.escape(KEY_PREFIX) + r"[0-9a-f]{64}")


def named_key(data) -> str:
    """The key of `data` (bytes or any buffer): the SHA-256 of its bytes."""
    return KEY_PREFIX + hashlib.sha256(data).hexdigest()


def is_named_key(key: str) -> bool:
    return bool(_KEY.fullmatch(key))


def key_digest(key: str) -> bytes | None:
    """The SHA-256 `key` names, or None where `key` is not a named-data key of this format."""
    return bytes.fromhex(key[len(KEY_PREFIX):]) if is_named_key(key) else None
