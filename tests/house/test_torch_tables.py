"""The test session's memo of torch's composite-implicit op table (tests/conftest.py, and the
generator's workers): what torch computes, kept per operator registry."""
from __future__ import annotations

import subprocess
import sys

from helpers import REPO


def test_the_memo_of_torchs_composite_op_table_follows_the_registry():
    """torch_tables.memoize_cia_table (the generator's workers): the kept table is torch's own, and
    an op defined afterwards is in the next one (run in a child: the memo replaces a torch
    function for the whole process)."""
    code = f"""
import sys, torch
sys.path.insert(0, {str(REPO / "tests" / "support")!r})
from torch._export import utils
from torch.export import exported_program
from torch_tables import memoize_cia_table
fresh = utils._collect_all_valid_cia_ops
memoize_cia_table()
memo = exported_program._collect_all_valid_cia_ops
assert memo is not fresh and memo() == fresh() and memo() == fresh()
lib = torch.library.Library("tte_memo_probe", "DEF")
lib.define("twice(Tensor x) -> Tensor")
lib.impl("twice", lambda x: x + x, "CompositeImplicitAutograd")
names = {{str(op) for op in memo()}}
assert "tte_memo_probe.twice.default" in names, sorted(n for n in names if "tte" in n)
assert memo() == fresh()
print("memo ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "memo ok" in out.stdout, out.stderr[-3000:]
