"""Lifting an ExportedProgram through the public API (`tte.lift_mutated_buffers`) runs the
production lift (`lowering.lift.lift_writes`) on the program's `module(check_guards=False)`: for
every case of lift_cases, the lifted graph run on the buffers' initial values returns what the
program's own module returns and each planned buffer's new value as that module holds it after
the call; the program is left as it was and the lifted module carries no input guards."""
from __future__ import annotations

import pytest
import torch
from torch.fx.node import map_arg

import torch_tensorrt_ext as tte
from lift_cases import CASES, Printing
from torch_tensorrt_ext.lowering.graph_writes import functional_program


def _nodes(gm):
    return [(n.op, n.name, str(n.target), map_arg(n.args, lambda a: a.name))
            for n in gm.graph.nodes]


def _state_of(module, fqn):
    *path, leaf = fqn.split(".")
    for p in path:
        module = getattr(module, p)
    return getattr(module, leaf)


def _call(ep, program, user_args):
    """The program's module called as it was exported: positionally, or by keyword (in order)."""
    args, kwargs = ep.example_inputs
    if kwargs and not args:
        return program(**dict(zip(kwargs, user_args, strict=True)))
    return program(*user_args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_lifted_program_computes_what_the_program_computes(name):
    ep, user_args = CASES[name]()
    plan = tte.plan_mutations(ep)
    assert len(plan) > 0
    functional = functional_program(ep)
    before = _nodes(functional.graph_module)
    lifted = tte.lift_mutated_buffers(ep, plan)
    assert _nodes(functional.graph_module) == before          # the program is left as it was
    assert "_guards_fn" not in lifted.gm.code
    assert sorted(f for f, _ in lifted.buffer_inputs) == sorted(plan.fqns)
    flat = [a for a in user_args if a is not None] if len(user_args) > len(lifted.user_inputs) \
        else list(user_args)
    state = [lifted.initial_value(f).clone() for f, _ in lifted.buffer_inputs]
    program = ep.module()
    with torch.no_grad():
        got = lifted.gm(*flat, *state)
        want = torch.utils._pytree.tree_leaves(_call(ep, program, user_args))
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    assert len(want) == lifted.num_user_outputs
    for g, w in zip(got[:lifted.num_user_outputs], want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    for fqn, i in lifted.buffer_outputs:
        torch.testing.assert_close(got[i], _state_of(program, fqn), rtol=0, atol=0, msg=fqn)


def test_a_program_with_effect_tokens_is_lifted_through_its_module(monkeypatch):
    ep = torch.export.export(Printing(), (torch.ones(1),))
    plan = tte.plan_mutations(ep)
    calls = []
    real = torch.export.ExportedProgram.module
    monkeypatch.setattr(torch.export.ExportedProgram, "module",
                        lambda self, **k: calls.append(k) or real(self, **k))
    lifted = tte.lift_mutated_buffers(ep, plan)
    assert calls == [{"check_guards": False}]
    assert lifted.buffer_inputs == (("n", "b_n"),) and lifted.buffer_outputs == (("n", 1),)
    assert "_guards_fn" not in lifted.gm.code
    out, new_n = lifted.gm(torch.ones(1), torch.zeros(1))
    assert torch.equal(out, torch.full((1,), 2.0)) and torch.equal(new_n, torch.ones(1))
