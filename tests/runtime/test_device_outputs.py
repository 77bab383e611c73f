"""The GPU tier's checks of a runner's run (tests/support/device_outputs.py), on hand-made case
folders: each check names what is wrong — a float beyond the tolerance, an integer or a byte that
differs, a copy off the device, bytes moved other than expected, a rerun after reset that
differed — and passes what is right (a last-bit float difference against eager included)."""
from __future__ import annotations

import json
import struct

from device_outputs import byte_mismatches, eager_mismatches, summary_mismatches

WANT_F = [1.0, -2.5, 3.25]
WANT_BF16 = struct.pack("<3H", 0x3F80, 0xC020, 0x4050)   # 1.0, -2.5, 3.25 in bfloat16
COPIES = {"ring": 96, "k": 0}


def _case(tmp_path, got_f, got_i=(7, 8), got_bf16=WANT_BF16):
    case = tmp_path / "case"
    case.mkdir()
    outs = [{"dtype": "float32", "shape": [3]}, {"dtype": "int64", "shape": [2]},
            {"dtype": "bfloat16", "shape": [3]}]
    (case / "expect.json").write_text(json.dumps(
        {"steps": 1, "outputs": [outs], "copy_bytes": COPIES}))
    for d, (f, i, b) in ((case, (WANT_F, (7, 8), WANT_BF16)), (tmp_path, (got_f, got_i, got_bf16))):
        (d / "want.0.0.bin" if d is case else d / "out.0.0.bin").write_bytes(struct.pack("<3f", *f))
        (d / "want.0.1.bin" if d is case else d / "out.0.1.bin").write_bytes(struct.pack("<2q", *i))
        (d / "want.0.2.bin" if d is case else d / "out.0.2.bin").write_bytes(b)
    return case


def test_outputs_equal_to_eager_pass(tmp_path):
    case = _case(tmp_path, WANT_F)
    assert eager_mismatches(case, tmp_path) == ([], 0.0)


def test_a_last_bit_float_difference_is_eager_within_tolerance_but_not_the_same_bytes(tmp_path):
    nudged = struct.unpack("<f", struct.pack("<I", struct.unpack("<I", struct.pack("<f", 3.25))[0]
                                             + 1))[0]
    case = _case(tmp_path, [1.0, -2.5, nudged])
    bad, worst = eager_mismatches(case, tmp_path)
    assert bad == [] and 0 < worst < 1e-6
    assert byte_mismatches(case, case.parent, case.parent) == []
    other = tmp_path / "other"
    other.mkdir()
    for j in range(3):
        (other / f"out.0.{j}.bin").write_bytes((case / f"want.0.{j}.bin").read_bytes())
    assert byte_mismatches(case, tmp_path, other) == [
        f"case step 0 output 0: {tmp_path.name} and other differ"]


def test_floats_beyond_the_tolerance_integers_and_bf16_that_differ_are_named(tmp_path):
    case = _case(tmp_path, [1.0, -2.5, 3.5], got_i=(7, 9),
                 got_bf16=struct.pack("<3H", 0x3F80, 0xC020, 0x4060))
    bad, _ = eager_mismatches(case, tmp_path)
    assert bad == ["case step 0 output 0: differs from eager by 0.25",
                   "case step 0 output 1 (int64): differs from eager",
                   "case step 0 output 2: differs from eager by 0.25"]


def test_a_missing_output_is_named(tmp_path):
    case = _case(tmp_path, WANT_F)
    (tmp_path / "out.0.1.bin").unlink()
    assert eager_mismatches(case, tmp_path)[0] == ["case step 0 output 1: None bytes, eager 16"]


def test_the_summary_names_host_copies_other_bytes_and_a_differing_rerun(tmp_path):
    case = _case(tmp_path, WANT_F)
    good = {"steps": 1, "copy_bytes": COPIES, "copy_paths": {"ring": [96, 0, 0], "k": [0, 0, 0]},
            "reset": True}
    assert summary_mismatches(case, good, reset=True) == []
    bad = {**good, "copy_bytes": {"ring": 192, "k": 0}, "copy_paths": {"ring": [0, 96, 96]},
           "reset": False}
    assert summary_mismatches(case, bad, reset=True) == [
        "case: ring copied 96 B across the host-device link, 96 B on the host",
        "case: copied {'ring': 192, 'k': 0} B per buffer, expected {'ring': 96, 'k': 0}",
        "case: after reset() the same steps gave other outputs"]
