"""Issue 45's refused classes 2-5, each written from the issue's description as a user would:
compiled module and `.pte` equal eager step by step, on the host and with state on the emulated
device. (Class 1 has its regressions where its fix lives, tests/engines/test_prims_to_aten.py;
class 5's verifier side is in tests/et/inspecting/test_verify_writes.py.) The programs of
classes 2-4 were not refused on this branch before its fixes either — the issue's exact
programs are not at hand — so they pin the described shapes, not a reproduced failure; class
5's (`two_buffers_written_from_conds`) is the generator's failing program shrunk: before
`saving.branch_results` its `.pte` wrote the second cond's value into buffer `a` at step 0
(refused by the verifier since it reads overwritten memory)."""
from __future__ import annotations

import pytest
import torch
from plan_models import (KvWriteAfterAHostOp, NestedMixedStateOutputs, TransposedColumnWrite,
                         TwoBuffersWrittenFromConds)
from stateful_check import ModuleProgram, check_program

pytestmark = pytest.mark.emulated_device


def _x(shape):
    return lambda step: (torch.randn(*shape, generator=torch.Generator().manual_seed(step)),)


PROGRAMS = {
    "transposed_column_write": ModuleProgram(TransposedColumnWrite, _x((1, 4)),
                                             TransposedColumnWrite.written),
    "nested_mixed_state_outputs": ModuleProgram(
        NestedMixedStateOutputs, _x((3, 4)), tuple(sorted(NestedMixedStateOutputs.written)),
        frozenset({"aten.sin.default"})),
    "kv_write_after_a_host_op": ModuleProgram(
        KvWriteAfterAHostOp, lambda step: (*_x((1, 8))(step), torch.tensor([step])),
        KvWriteAfterAHostOp.written, frozenset({"aten.sin.default"})),
    "two_buffers_written_from_conds": ModuleProgram(
        TwoBuffersWrittenFromConds, TwoBuffersWrittenFromConds.args,
        TwoBuffersWrittenFromConds.written, frozenset({"aten.sigmoid.default"})),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_described_program_runs_like_eager(name):
    program = PROGRAMS[name]
    result = check_program(program, steps=4)
    assert result.ok, result.report(program)
