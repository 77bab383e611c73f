"""A `torch.cond`'s result read after a later control-flow op keeps its value
(`saving.branch_results`): ExecuTorch 1.5.1 alone hands the branch's
own tensor on as the result, and the next cond's branch computes into the same memory; the pass
copies exactly the results read after such an op, and nothing else."""
from __future__ import annotations

import torch
from executorch.exir import ExecutorchBackendConfig, schema, to_edge
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir._serialize._program import deserialize_pte_binary
from plan_models import RingWrittenInABranch, TwoBuffersWrittenFromConds
from stateful_check import ModuleProgram, check_program

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.executorch.saving.branch_results import CopyBranchResults


class TwoConds(torch.nn.Module):
    """Two conds, the first's result returned (read after the second ran)."""

    def forward(self, x):
        a = torch.cond(x.sum() > 0, lambda v: v + 1, lambda v: v - 1, (x,))
        b = torch.cond(x.sum() > 0, lambda v: v * 3, lambda v: v * 5, (x,))
        return a, b


class TwoCondsInABranch(torch.nn.Module):
    """TwoConds inside a cond's true branch, a third cond after the outer one."""

    def forward(self, x):
        r = torch.cond(x.sum() > 0, lambda v: torch.cat(TwoConds()(v)),
                       lambda v: torch.cat([v, v]), (x,))
        c = torch.cond(x.sum() > 0, lambda v: v * 7, lambda v: v * 9, (x,))
        return r, c


def _run(tmp_path, *passes, model=TwoConds) -> list[torch.Tensor]:
    """`model` emitted by ExecuTorch alone (edge passes `passes` first), run on ones(1, 4)."""
    x = torch.ones(1, 4)
    et = to_edge(torch.export.export(model(), (x,))).to_executorch(
        ExecutorchBackendConfig(passes=list(passes)))
    (tmp_path / "c.pte").write_bytes(et.buffer)
    return [o.clone() for o in tte.executorch.load(tmp_path / "c.pte").run(x)]


def test_a_cond_result_read_after_another_cond_keeps_its_value(tmp_path):
    want = [torch.full((1, 4), 2.0), torch.full((1, 4), 3.0)]
    fixed = _run(tmp_path, CopyBranchResults(exir_ops.edge.dim_order_ops._clone_dim_order.default))
    assert all(torch.equal(g, w) for g, w in zip(fixed, want, strict=True))
    # ExecuTorch 1.5.1 alone: the first result holds the second cond's value (when this starts
    # failing, ExecuTorch fixed its plan of cond results and the pass can go)
    alone = _run(tmp_path)
    assert torch.equal(alone[0], want[1]) and torch.equal(alone[1], want[1])


def test_results_inside_a_branch_are_copied_too(tmp_path):
    """A branch's own graph is treated like the method's: the inner first result, read after the
    inner second cond, keeps its value (ExecuTorch alone: it holds the second's)."""
    copy = CopyBranchResults(exir_ops.edge.dim_order_ops._clone_dim_order.default)
    r, c = _run(tmp_path, copy, model=TwoCondsInABranch)
    assert r.flatten().tolist() == [2.0] * 4 + [3.0] * 4 and c.flatten().tolist() == [7.0] * 4
    assert _run(tmp_path, model=TwoCondsInABranch)[0].flatten().tolist() == [3.0] * 8


def _copies(model, args, host_ops=frozenset()) -> int:
    """Copies (`_clone_dim_order`) of a cond's result in `model`'s program saved through the
    public flow (torch_tensorrt.compile and save, reference engines), which ran like eager for
    4 steps."""
    seen = {}
    program = ModuleProgram(model, args, model.written, host_ops)
    result = check_program(program, steps=4, observe=seen.setdefault)
    assert result.ok, result.report(program)
    plan = deserialize_pte_binary(seen["pte"]).program.execution_plan[0]
    instructions = [ins.instr_args for chain in plan.chains for ins in chain.instructions]
    results = {i.move_to for i in instructions if isinstance(i, schema.MoveCall)}
    return sum(1 for i in instructions if isinstance(i, schema.KernelCall)
               and plan.operators[i.op_index].name.endswith("_clone_dim_order")
               and i.args[0] in results)


def test_only_results_read_after_a_later_control_flow_op_are_copied():
    """One cond: its result is written back before any other control-flow op, no copy. Two:
    only the first's result (written back after the second cond) is copied."""
    assert _copies(RingWrittenInABranch, RingWrittenInABranch.args) == 0
    assert _copies(TwoBuffersWrittenFromConds, TwoBuffersWrittenFromConds.args,
                   frozenset({"aten.sigmoid.default"})) == 1
