"""A composite op that writes state its schema does not declare — train-mode `batch_norm`'s running
statistics, as torch.export's training IR keeps it — is found (`composite_writes`), its program is
functionalized before torch-tensorrt's pre-lowering runs fx's dead-code elimination (which deleted
a batch norm whose normalized output nothing reads, and its write with it: the buffer silently kept
its old value in the compiled module and the `.pte`), and the program steps like eager. Found by
the method generator (a `fill` method whose only effect is a batch norm's statistics)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torch_tensorrt_ext.lowering import graph_writes
from torch_tensorrt_ext.lowering.composite_writes import hidden_writes
from torch_tensorrt_ext.lowering.op_writes import hides_write, written_roots

from stateful_check import ModuleProgram, check_program


class DeadStatistics(torch.nn.Module):
    """A batch norm whose normalized output nothing reads: its only effect is on the running
    statistics (rows 0 and 1 of `stats`). `read`: the buffer is also read through `.float()`,
    whose `_assert_tensor_metadata` torch-tensorrt's pre-lowering removes — and then runs fx's
    dead-code elimination."""

    def __init__(self, read: bool = True, training: bool = True, norm=F.batch_norm):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("stats", torch.zeros(2, 8))
        self.read, self.training_stats, self.norm = read, training, norm

    def forward(self, x):
        h = self.lin(x)
        spread = h.unsqueeze(-1) + torch.arange(3.0) * (1 + h.abs().unsqueeze(-1))
        if self.norm is F.batch_norm:
            F.batch_norm(spread, self.stats[0], self.stats[1], training=self.training_stats,
                         momentum=0.1)
        else:
            F.instance_norm(spread, self.stats[0], self.stats[1],
                            use_input_stats=self.training_stats, momentum=0.1)
        return h + self.stats.float().mean() if self.read else h


def _args(step: int) -> tuple:
    return (torch.randn(1, 8, generator=torch.Generator().manual_seed(step)),)


def _norm_node(ep: torch.export.ExportedProgram, op) -> torch.fx.Node:
    (node,) = [n for n in ep.graph.nodes if n.target is op]
    return node


@pytest.mark.parametrize("norm, op", [(F.batch_norm, torch.ops.aten.batch_norm.default),
                                      (F.instance_norm, torch.ops.aten.instance_norm.default)],
                         ids=["batch_norm", "instance_norm"])
def test_a_norm_in_training_writes_its_running_statistics(norm, op):
    ep = torch.export.export(DeadStatistics(norm=norm), _args(0))
    node = _norm_node(ep, op)
    assert not any(a.alias_info and a.alias_info.is_write for a in op._schema.arguments)
    assert hidden_writes(node) == ((3, "running_mean"), (4, "running_var"))
    assert hides_write(node)
    assert [r.name for r in written_roots(node)] == ["b_stats", "b_stats"]
    assert graph_writes.written_buffers(ep) == {"stats"}
    assert graph_writes.hides_writes(ep)    # functionalized before torch-tensorrt's lowering


def test_a_norm_in_inference_and_a_cast_of_a_buffer_write_nothing():
    ep = torch.export.export(DeadStatistics(training=False), _args(0))
    assert hidden_writes(_norm_node(ep, torch.ops.aten.batch_norm.default)) == ()
    cast = next(n for n in ep.graph.nodes if n.target is torch.ops.aten.to.dtype)
    assert hidden_writes(cast) == () and not hides_write(cast)
    assert graph_writes.written_buffers(ep) == set()
    assert not graph_writes.hides_writes(ep)


@pytest.mark.parametrize("read", [True, False], ids=["read_through_float", "not_read"])
@pytest.mark.parametrize("norm", [F.batch_norm, F.instance_norm],
                         ids=["batch_norm", "instance_norm"])
def test_running_statistics_nothing_reads_step_like_eager(read, norm):
    """Compiled module and `.pte` (reference engines), 4 steps: outputs and `stats` equal
    eager's after every step."""
    program = ModuleProgram(lambda: DeadStatistics(read=read, norm=norm), _args, ("stats",))
    result = check_program(program)
    assert result.ok, result.report()
