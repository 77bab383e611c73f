"""The reference engine keeps lowering and running every (op, dtype) it was measured to accept
(tests/fixtures/converter_accepted.txt, written by scripts/converter_coverage.py from
torch-tensorrt 2.14.0's converter registry): each listed op's first sample of one of its listed
dtypes (the dtype chosen by the op's name, so every dtype is exercised across the list), built as
a one-op reference engine, returns eager's results."""
from __future__ import annotations

import zlib

from converter_ops import DTYPES, opinfos_by_name, accepted_list, cases, check, overload
from helpers import TESTS
from rtx_env import torch_tensorrt_or_skip

ACCEPTED = accepted_list(TESTS / "fixtures" / "converter_accepted.txt")


def test_the_list_names_ops_the_registry_converts():
    torch_tensorrt_or_skip()
    from converter_ops import converter_ops

    names = {o.name() for o in converter_ops()}
    assert len(ACCEPTED) > 100 and set(ACCEPTED) <= names


def _first_converted(name: str, dtype, infos) -> tuple[str, str]:
    """check() of the op's first sample of `dtype` the converter accepts."""
    for case in cases(overload(name), infos, (dtype,)):
        status, why = check(case)
        if status != "unconverted":
            return status, why
    return "unsampled", "no sample the converter accepts any more"


def test_every_listed_op_still_runs_like_eager_as_a_one_op_reference_engine():
    torch_tensorrt_or_skip()
    infos, refused = opinfos_by_name(), []
    labels = {str(d).split(".")[1]: d for d in DTYPES}
    for name, dtypes in sorted(ACCEPTED.items()):
        label = dtypes[zlib.crc32(name.encode()) % len(dtypes)]
        status, why = _first_converted(name, labels[label], infos)
        if status != "accepted":
            refused.append(f"{name} {label}: {status} {why}")
    assert not refused, "\n".join(refused)
