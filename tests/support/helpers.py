"""Paths and small measures every test layer shares (one place, not a copy per test file)."""
from __future__ import annotations

import json
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
SUPPORT = TESTS / "support"     # these modules: what a child process puts on its path


def buffer_nbytes(model, fqn: str) -> int:
    """Bytes of buffer `fqn` of `model`: what one copy of it moves."""
    b = model.get_buffer(fqn)
    return b.numel() * b.element_size()


def kv_meta(**over) -> dict:
    """The valid TR03 metadata the blob tests of both languages start from
    (fixtures/kv_meta.json: KV aliased, a copy-back counter, one delegate output), with `over`'s
    members replaced."""
    md = json.loads((FIXTURES / "kv_meta.json").read_text())
    md.update(over)
    return md


def executorch_error_lines(stderr: str) -> list[str]:
    """ExecuTorch's error lines in what a process wrote to its stderr ("E 00:00:08.000000
    executorch:file.h:91] ..."), and any line naming the temp allocator whatever emitter wrote
    it (ExecuTorch's llama ops log through their own library's: "[kernel_runtime_context.h:91]
    ...")."""
    return [line for line in stderr.splitlines()
            if line.startswith("E ") or "temp allocator" in line]
