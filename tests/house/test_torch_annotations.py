"""The test session's `py_impl` (tests/conftest.py, the generator's workers): torch's own method,
recompiled with postponed annotations — same behaviour, no annotation objects built per call."""
from __future__ import annotations

import subprocess
import sys

from helpers import REPO
from torch_annotations import _same_code


def test_the_recompiled_py_impl_registers_like_torchs_and_builds_no_annotations():
    """Run in a child (the method is replaced for the whole process): before, the closure's
    annotations are objects; after, strings — and a kernel registers, dispatches and refuses a
    second registration as torch's method does."""
    code = f"""
import sys, torch
sys.path.insert(0, {str(REPO / "tests" / "support")!r})
from torch._C import DispatchKey
from torch._ops import OperatorBase
from torch_annotations import lazy_py_impl_annotations
lib = torch.library.Library("tte_annotations_probe", "DEF")
lib.define("f(Tensor x) -> Tensor")
op = torch.ops.tte_annotations_probe.f.default
before = op.py_impl(DispatchKey.CPU).__annotations__
assert before and not any(isinstance(v, str) for v in before.values()), before
assert lazy_py_impl_annotations() and lazy_py_impl_annotations()
assert OperatorBase.py_impl.__qualname__ == "OperatorBase.py_impl"
after = op.py_impl(DispatchKey.CPU).__annotations__
assert after.keys() == before.keys() and all(isinstance(v, str) for v in after.values()), after
kernel = lambda x: x * 3
assert op.py_impl(DispatchKey.CompositeExplicitAutograd)(kernel) is kernel
assert op.py_kernels[DispatchKey.CompositeExplicitAutograd] is kernel
try:
    op.py_impl(DispatchKey.CompositeExplicitAutograd)(kernel)
except RuntimeError as e:
    assert "Trying to override a python impl" in str(e), e
else:
    raise AssertionError("a second registration was taken")
print("py_impl ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "py_impl ok" in out.stdout, out.stderr[-3000:]


def test_code_that_reads_other_names_is_not_the_same_code():
    def outer():
        def inner(x):
            return len(x)
        return inner

    def other():
        def inner(x):
            return sum(x)
        return inner

    assert _same_code(outer.__code__, outer.__code__)
    assert not _same_code(outer.__code__, other.__code__)
