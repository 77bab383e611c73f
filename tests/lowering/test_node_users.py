"""fx's index of each node's readers made to agree with the arguments again
(`lowering/node_users.py`).

Found by the method generator (a recipe refused at save, "Argument 'gt' of Node 'copy_' was used
before it has been defined"): torch.export under `torch.no_grad()` inlines a `no_grad` block of
one result itself and clears every reader of that result, the buffer write inside the block
included; torch-tensorrt's dead-code elimination then deleted the value under the write. The
program-level regression is `tests/et/saving/test_methods_share_state.py`'s `NO_GRAD_FLAG`.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from torch_tensorrt_ext.lowering.node_users import broken_users, with_node_users


class _Flag(nn.Module):
    """A flag written inside a `no_grad` block from a value nothing after the block reads."""

    def __init__(self):
        super().__init__()
        self.register_buffer("flag", torch.zeros(1, 8, dtype=torch.bool))

    def forward(self, x):
        out = x * 2
        h = x + self.flag.float().mean()
        with torch.no_grad():
            g = h > 0
            self.flag.copy_(g)
        h = h + g.float().mean()          # dead: only the write keeps `g`
        return (out,)


def _exported(grad: bool) -> torch.export.ExportedProgram:
    with torch.set_grad_enabled(grad):
        return torch.export.export(_Flag(), (torch.randn(1, 8),), strict=False)


def _code(ep: torch.export.ExportedProgram) -> str:
    return ep.graph_module.code


def test_a_program_exported_under_no_grad_has_its_write_missing_from_the_index_then_restored():
    ep = _exported(grad=False)
    # torch.export's own fault, the precondition (if torch fixes it, this test says so)
    assert broken_users(ep.graph_module) == (("", "copy_"),)
    before = _code(ep)
    fixed = with_node_users(ep)
    assert fixed is not ep and broken_users(fixed.graph_module) == ()
    assert broken_users(ep.graph_module) == (("", "copy_"),) and _code(ep) == before   # untouched
    assert _code(fixed) == before          # the same nodes and arguments
    gt = next(n for n in fixed.graph.nodes if n.name == "gt")
    assert "copy_" in {u.name for u in gt.users}


def _lowered(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """torch-tensorrt's own pre-lowering pass that dropped the value: it erases the assertion
    nodes, then cleans up with fx's dead-code elimination and lints."""
    from torch_tensorrt.dynamo._settings import CompilationSettings
    from torch_tensorrt.dynamo.lowering.passes.remove_assert_nodes import remove_assert_nodes
    return remove_assert_nodes(gm, CompilationSettings())


def test_torch_tensorrt_s_clean_up_keeps_the_write_once_the_index_is_restored():
    """With the index as torch.export left it, the clean-up deletes the value the write reads
    and lint refuses the graph; restored, the value and the write stay (only the dead read
    goes), and the program writes the flag as eager does."""
    with pytest.raises(RuntimeError, match="Argument 'gt' of Node 'copy_' was used before"):
        _lowered(_exported(grad=False).graph_module)

    fixed = with_node_users(_exported(grad=False))
    gm = _lowered(fixed.graph_module)
    names = {n.name for n in gm.graph.nodes}
    assert {"gt", "copy_"} <= names and "add_1" not in names
    x = torch.randn(1, 8)
    eager, module = _Flag(), fixed.module()
    for _ in range(3):
        assert torch.equal(module(x)[0], eager(x)[0])
        assert torch.equal(module.flag, eager.flag)
        x = -x


def test_a_program_whose_index_agrees_is_returned_as_it_is():
    ep = _exported(grad=True)
    assert broken_users(ep.graph_module) == ()
    assert with_node_users(ep) is ep


def test_a_reader_recorded_that_no_longer_reads_is_named_too():
    ep = _exported(grad=True)
    gm = ep.graph_module
    x = next(n for n in gm.graph.nodes if n.name == "x")
    mul = next(n for n in gm.graph.nodes if n.name == "mul")
    x.users[mul.next] = None             # an index entry no argument backs
    assert (("", "x") in broken_users(gm))
    fixed = with_node_users(ep)
    assert broken_users(fixed.graph_module) == ()
