"""What must hold of a file before ExecuTorch's runtime is given it as a `.pte`.

Invariant: `read_pte(path)` returns the file's bytes only if it is a readable regular file that
starts with an ExecuTorch flatbuffer header — root offset inside the file, file identifier
`ET12` — and, when it has an extended header (`eh00`), the flatbuffer and the segments that
header describes lie inside the file; `read_pte_program(path)` makes the same checks and returns
only the program flatbuffer (the bytes before the segments: a loader reads no engine or weight
bytes twice). Anything else raises `PteError` (a `ValueError`) whose
message names the file, says what is wrong with it and what to do. The checks read header
fields only; the flatbuffer itself is verified by ExecuTorch (`Verification.InternalConsistency`,
`Program` loads with it), whose refusal `executorch.running.program` reports as a `PteError`
too.
"""
from __future__ import annotations

import stat
from pathlib import Path

from ...errors import TteError

__all__ = ["PteError", "read_pte", "read_pte_program", "check_pte_bytes", "IDENTIFIER"]

IDENTIFIER = b"ET12"          # schema/program.fbs `file_identifier`
_FLATBUFFER_HEADER = 8        # u32 root offset + 4-byte file identifier
_EXTENDED_MAGIC = b"eh00"     # exir/_serialize/_program.py `_ExtendedHeader`
_EXTENDED_MIN_LENGTH = 24     # magic, u32 length, u64 program size, u64 segment base offset
_HEADER_BYTES = 64            # what the checks read: both headers
_REEXPORT = 're-export it (torch_tensorrt.save(..., output_format="executorch"))'


class PteError(TteError, ValueError):
    """A file cannot be loaded as an ExecuTorch program; the message names it and says why."""


def _u(data: bytes, start: int, size: int) -> int:
    return int.from_bytes(data[start:start + size], "little")


def _open_regular(p: Path) -> int:
    """The size of `p`, a readable regular file (else `PteError`)."""
    try:
        st = p.stat()
    except FileNotFoundError:
        raise PteError(f"{p}: no such file; pass the path of an existing .pte") from None
    except OSError as e:
        raise PteError(f"{p}: cannot be read ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise PteError(f"{p}: is a directory, not a .pte file")
    if not stat.S_ISREG(st.st_mode):
        raise PteError(f"{p}: is not a regular file; pass the path of a .pte file")
    return st.st_size


def _read(p: Path, size: int = -1) -> bytes:
    try:
        with open(p, "rb") as f:
            return f.read(size)
    except OSError as e:
        raise PteError(f"{p}: cannot be read ({e.strerror})") from None


def read_pte(path: str | Path) -> bytes:
    """The bytes of `path`, after the checks of the module invariant."""
    p = Path(path)
    _open_regular(p)
    data = _read(p)
    check_pte_bytes(data, str(p))
    return data


def read_pte_program(path: str | Path) -> bytes:
    """The program flatbuffer of `path` (its first `program_size` bytes, or the whole file
    without an extended header), after the checks of the module invariant."""
    p = Path(path)
    n = _open_regular(p)
    head = _read(p, _HEADER_BYTES)
    program_size = check_pte_header(head, n, str(p))
    return head if program_size <= len(head) else _read(p, program_size)


def check_pte_bytes(data: bytes, name: str) -> None:
    """Raise `PteError` naming `name` unless `data` passes the header checks."""
    check_pte_header(data[:_HEADER_BYTES], len(data), name)


def check_pte_header(data: bytes, n: int, name: str) -> int:
    """The program flatbuffer's size, unless the header `data` (a file's first bytes) of an
    `n`-byte file fails the checks (`PteError` naming `name`)."""
    if n == 0:
        raise PteError(f"{name}: is empty (0 bytes), not an ExecuTorch program; {_REEXPORT}")
    if n < _FLATBUFFER_HEADER:
        raise PteError(f"{name}: is {n} bytes, shorter than a flatbuffer header "
                       f"({_FLATBUFFER_HEADER} bytes): truncated or not a .pte; {_REEXPORT}")
    ident = data[4:8]
    if ident != IDENTIFIER:
        raise PteError(f"{name}: is not an ExecuTorch program: its flatbuffer file identifier "
                       f"is {ident!r}, expected {IDENTIFIER!r} (not a .pte, a corrupt one, or "
                       f"one from an incompatible ExecuTorch)")
    root = _u(data, 0, 4)
    if not _FLATBUFFER_HEADER <= root < n:
        raise PteError(f"{name}: flatbuffer root offset {root} is outside the file ({n} bytes): "
                       f"truncated or corrupt; {_REEXPORT}")
    if data[8:12] != _EXTENDED_MAGIC:
        return n  # no extended header: the whole file is the flatbuffer (ExecuTorch allows it)
    length = _u(data, 12, 4)
    if length < _EXTENDED_MIN_LENGTH or 8 + length > n:
        raise PteError(f"{name}: extended header length {length} is invalid for a {n}-byte "
                       f"file: truncated or corrupt; {_REEXPORT}")
    program_size = _u(data, 16, 8)
    base = _u(data, 24, 8)
    segments = _u(data, 32, 8) if length >= _EXTENDED_MIN_LENGTH + 8 else 0
    if program_size > n:
        raise PteError(f"{name}: is truncated: its header says the program is {program_size} "
                       f"bytes, the file has {n}; {_REEXPORT}")
    if base and (base < program_size or base + segments > n):
        raise PteError(f"{name}: is truncated: its header puts segment data at bytes "
                       f"{base}..{base + segments}, the file has {n}; {_REEXPORT}")
    return program_size
