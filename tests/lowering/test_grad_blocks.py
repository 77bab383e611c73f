"""`with torch.no_grad():` blocks, and disabled autocast ones, inlined before planning
(`lowering/grad_blocks.py`).

torch.export keeps a grad-mode block as a higher-order op with a body graph of its own; writes
inside one were out of reach of the passes that read a program's in-place writes. Found with the
generator's `no_grad` draws (tests/e2e/test_generated_programs' `..._in_a_no_grad_block`
regressions): two buffers copied from one input inside a block were refused by
functionalization ("User output x is not in the correct order"); state kept on a plain
attribute and written inside a block was refused by torch-tensorrt ("Constant state is mutated
in the forward method"); two buffers copied from one input inside a disabled autocast block
were refused like the first (found by hand after the fix for no_grad blocks).
"""
from __future__ import annotations


import torch
from torch import nn
from stateful_check import ModuleProgram, check_program

from torch_tensorrt_ext.lowering.grad_blocks import without_grad_blocks
from torch_tensorrt_ext.lowering.subgraphs import graphs

_BLOCK = torch.ops.higher_order.wrap_with_set_grad_enabled


class _Blocks(nn.Module):
    """Two blocks, one nested in another, one whose result is returned as it is."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("a", torch.zeros(1, 8))
        self.register_buffer("b", torch.zeros(1, 8))
        self.register_buffer("n", torch.zeros(1))

    def forward(self, x):
        y = self.lin(x)
        with torch.no_grad():
            self.a.copy_(x)
            self.b.copy_(x)                  # the same source: refused un-inlined
            with torch.enable_grad():
                z = self.lin(self.a) * 2
            self.n.add_(1)
        with torch.no_grad():
            r = self.b[-1].add_(y[0])        # a negative index
        return y + z + self.a, r, self.n * 1


def _blocks(gm) -> int:
    return sum(len(g.graph.find_nodes(op="call_function", target=_BLOCK)) for g in graphs(gm))


def _steps(module, n=3):
    out = []
    for step in range(n):
        out.append((module(*_args(step)), {k: v.clone() for k, v in module.named_buffers()}))
    return out


def _assert_same_steps(ep, flat) -> None:
    """`flat` computes, step by step, the outputs and state `ep` computes from the same start
    (the two programs hold the same state tensors: they are restored in between)."""
    start = {k: v.clone() for k, v in ep.state_dict.items()}
    want = _steps(ep.module())
    with torch.no_grad():
        for k, v in start.items():
            ep.state_dict[k].copy_(v)
    torch.testing.assert_close(_steps(flat.module()), want, rtol=0, atol=0)


def _args(step):
    return (torch.randn(1, 8, generator=torch.Generator().manual_seed(step)),)


def test_blocks_inlined_compute_what_the_program_computed_and_leave_it_as_it_was():
    torch.manual_seed(0)
    ep = torch.export.export(_Blocks().eval(), (torch.randn(1, 8),))
    codes = [g.code for g in graphs(ep.graph_module)]
    assert _blocks(ep.graph_module) == 3
    flat = without_grad_blocks(ep)
    assert _blocks(flat.graph_module) == 0
    assert len(list(graphs(flat.graph_module))) == 1    # no body left behind
    assert [g.code for g in graphs(ep.graph_module)] == codes
    # the signature follows the graph: a user output the block computed names the inlined node
    outs = flat.graph_module.graph.output_node().args[0]
    assert [s.arg.name for s in flat.graph_signature.output_specs] == [o.name for o in outs]
    _assert_same_steps(ep, flat)


def test_a_program_without_blocks_is_returned_as_it_is():
    ep = torch.export.export(nn.Linear(8, 8), (torch.randn(1, 8),))
    assert without_grad_blocks(ep) is ep


class _PlainAttributeState(nn.Module):
    """State on a plain tensor attribute (non-strict export lifts it as a constant), written in a
    block; every output reads it, so equal outputs are equal state."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.state = torch.zeros(3, 8)

    def forward(self, x):
        y = self.lin(x)
        with torch.no_grad():
            self.state[-1].add_(y[0])
        return y * self.state.sum(0)


def test_state_on_a_plain_attribute_written_in_a_block_runs_like_eager():
    program = ModuleProgram(_PlainAttributeState, _args, ())
    result = check_program(program)
    assert result.ok, result.report(program)


def test_blocks_through_compile_and_the_pte_run_like_eager():
    program = ModuleProgram(_Blocks, _args, ("a", "b", "n"))
    result = check_program(program)
    assert result.ok, result.report(program)


class _AutocastBlocks(nn.Module):
    """A disabled autocast block (as transformers' rotary embeddings write one) holding two
    copies from one input — refused by functionalization before it was inlined — and an enabled
    one, which casts and is left as it is."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("a", torch.zeros(1, 8))
        self.register_buffer("b", torch.zeros(1, 8))

    def forward(self, x):
        with torch.autocast(device_type="cpu", enabled=False):
            self.a.copy_(x)
            self.b.copy_(x)
        y = self.lin(x + self.a + self.b)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            z = self.lin(y)
        return y, z


def test_a_disabled_autocast_block_is_inlined_and_an_enabled_one_kept():
    torch.manual_seed(0)
    ep = torch.export.export(_AutocastBlocks().eval(), (torch.randn(1, 8),))
    autocast = torch.ops.higher_order.wrap_with_autocast
    calls = ep.graph_module.graph.find_nodes(op="call_function", target=autocast)
    assert [c.args[2] for c in calls] == [False, True]          # enabled=...
    flat = without_grad_blocks(ep)
    kept = flat.graph_module.graph.find_nodes(op="call_function", target=autocast)
    assert [c.args[2] for c in kept] == [True]
    copies = flat.graph_module.graph.find_nodes(op="call_function",
                                                target=torch.ops.aten.copy_.default)
    assert len(copies) == 2                      # the program's own in-place writes now
    _assert_same_steps(ep, flat)


def test_writes_in_a_disabled_autocast_block_run_like_eager():
    class _Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.register_buffer("a", torch.zeros(1, 8))
            self.register_buffer("b", torch.zeros(1, 8))

        def forward(self, x):
            with torch.autocast(device_type="cpu", enabled=False):
                self.a.copy_(x)
                self.b.copy_(x)
            return self.lin(x + self.a + self.b)

    program = ModuleProgram(_Model, _args, ("a", "b"))
    result = check_program(program)
    assert result.ok, result.report(program)
