"""Engine weights as ExecuTorch named data, handed over without a copy.

Invariant: `named_data(entries, external)` is a `NamedDataStoreOutput` holding each
(key, bytes) once — in the `.pte` (`external` None) or in the external data file `external`
(`<external>.ptd` beside the `.pte`, ExecuTorch's `external_data` tag) — whose buffers are views
of the bytes the compiled module holds, not copies: ExecuTorch's store, its deduplication (a
SHA-256 per buffer) and its writer (`Cord.write_to_file`) read them in place. ExecuTorch accepts
only `bytes` or its `FileBackedData` there; `HeldBytes` is a `FileBackedData` over memory (its
file operations answered from the view), so the largest part of a program — its weights — is
never copied on its way to the file.
"""
from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence

from executorch.exir._serialize._cord import FileBackedData
from executorch.exir._serialize._named_data_store import NamedDataStoreOutput
from executorch.exir._serialize.data_serializer import DataEntry

from ...contracts.named_key import key_digest

__all__ = ["HeldBytes", "named_data", "ALIGNMENT"]

# ExecuTorch kernels read weights with vector loads: every named-data weight starts at a
# multiple of 64 bytes in the file (and so in its mapping)
ALIGNMENT = 64


class HeldBytes(FileBackedData):
    """A read-only byte view ExecuTorch's serializer takes where it takes a file's bytes."""

    def __init__(self, view: memoryview, sha256: bytes | None = None) -> None:  # noqa: D107
        # FileBackedData's own __init__ would stat a path: nothing of it applies
        self._view = memoryview(view).cast("B")
        self._size = len(self._view)
        self._sha256 = sha256
        self._finalizer = None
        self._path = "<memory>"

    def prefix(self, size: int) -> bytes:
        return bytes(self._view[:size])

    def sha256(self) -> bytes:
        if self._sha256 is None:
            self._sha256 = hashlib.sha256(self._view).digest()
        return self._sha256

    def to_bytes(self) -> bytes:
        return bytes(self._view)     # only where ExecuTorch joins a whole program in memory

    def write_to_file(self, outfile: io.BufferedIOBase) -> None:
        outfile.write(self._view)


def _digest(key: str) -> bytes | None:
    """A `tte/sha256/<hex>` key names its bytes' SHA-256: ExecuTorch's store need not hash them."""
    return key_digest(key)


def named_data(entries: Sequence[tuple[str, memoryview]], external: str | None = None
               ) -> NamedDataStoreOutput:
    """`entries` (key, bytes) as ExecuTorch named data, in the `.pte` or in `external`'s file."""
    buffers, table = [], {}
    for key, view in entries:
        if key in table:
            continue
        table[key] = DataEntry(buffer_index=len(buffers), alignment=ALIGNMENT, tensor_layout=None)
        buffers.append(HeldBytes(view, _digest(key)))
    if external is None:
        return NamedDataStoreOutput(buffers, table, {})
    return NamedDataStoreOutput(buffers, {}, {external: table} if table else {})
