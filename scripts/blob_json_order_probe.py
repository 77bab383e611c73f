"""What the Python blob reader's emulation of the C++ reader's defect order buys (issue 34 item 2):
a plain reader — `json.loads` with the same hooks, then depth, surrogates and NUL checked on the
parsed value — is run beside `contracts.blob_json.load_json` over the differential corpus
(`tests/contracts/test_blob_differential.py`: hand-made hostile blobs and 3,300 seeded mutations).
Prints, per corpus, how many blobs the two readers accept/refuse differently and how many they
refuse under a different check id (with the pairs). Figures only; nothing here is a test.

Usage: python scripts/blob_json_order_probe.py
"""
from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "support"), str(REPO / "tests" / "contracts")]

import test_blob_differential as D  # noqa: E402

from torch_tensorrt_ext.contracts import blob_json as BJ  # noqa: E402
from torch_tensorrt_ext.contracts.blob_checks import BlobError  # noqa: E402


def _depth(value) -> int:
    stack, deepest = [(value, 1)], 0
    while stack:
        x, d = stack.pop()
        if isinstance(x, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in (x.values() if isinstance(x, dict) else x))
    return deepest


def plain_load_json(raw: bytes):
    """The reader without the order emulation: every defect found, named by its own precedence."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BlobError("not UTF-8", check="json.utf8") from None
    try:
        value = json.loads(text, object_pairs_hook=BJ._object, parse_constant=BJ._refuse_constant,
                           parse_float=BJ._float, parse_int=BJ._int)
    except json.JSONDecodeError:
        raise BlobError("malformed", check="json.syntax") from None
    except RecursionError:
        raise BlobError("too deep", check="json.depth") from None
    if _depth(value) > BJ.MAX_NESTING:
        raise BlobError("too deep", check="json.depth")
    BJ._refuse_surrogates(value)
    BJ._refuse_nul(value)
    return value


def _verdicts(cases, reader):
    """(accepted, check id) of `blob.parse` for each case, with `reader` as its JSON reader."""
    import torch_tensorrt_ext.contracts.blob_validate as model   # the module calling load_json
    kept = model.load_json
    model.load_json = reader
    try:
        return [D.python_verdict(data)[:2] for _, data in cases]
    finally:
        model.load_json = kept


def main() -> None:
    for label, cases in (("hostile", list(D.hostile_cases())),
                         ("mutations", list(D.mutation_cases()))):
        ours, plain = _verdicts(cases, BJ.load_json), _verdicts(cases, plain_load_json)
        verdict = sum(a[0] != b[0] for a, b in zip(ours, plain, strict=True))
        ids = collections.Counter((a[1], b[1]) for a, b in zip(ours, plain, strict=True)
                                  if a[0] == b[0] and a[1] != b[1])
        print(f"{label}: {len(cases)} blobs, accept/refuse differ {verdict}, check id differs "
              f"{sum(ids.values())}: " + ", ".join(f"{a} -> {b} x{n}" for (a, b), n in
                                                   ids.most_common()))


if __name__ == "__main__":
    main()
