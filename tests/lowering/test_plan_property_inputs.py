"""Property: the plan accounts for every tensor the program writes in place, whatever kind of
graph input torch.export made it — a buffer, a constant lifted from a plain Python object
(transformers' caches under non-strict export, aliasing a registered buffer or not), or a user
input. Buffers and constants are planned (a constant as the buffer it shares memory with, or as a
buffer of its own under its constant FQN, the reason saying so) and the functional program
carries each as a BUFFER_MUTATION; a user input written in place is refused naming it. Nothing is
dropped."""
from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.lowering.graph_writes import functional_program, written_buffers

SHAPE = (1, 2, 8, 4)
WRITES = {
    "add_": lambda t, x, p: t.add_(x.sum()),
    "index_copy_": lambda t, x, p: t.index_copy_(2, p, x),
    "slice_copy_": lambda t, x, p: t[:, :, 1:2].copy_(x),
    "view_mul_": lambda t, x, p: t[0].mul_(2),
}
KINDS = ("buffer", "object_of_buffer", "object", "user")


class Holder:
    """A plain Python object holding tensors (like transformers' `StaticCache`)."""

    def __init__(self):
        self.tensors = {}


class Gen(torch.nn.Module):
    def __init__(self, targets):
        super().__init__()
        self.targets = targets
        self.holder = Holder()
        self.users = [i for i, (kind, _) in enumerate(targets) if kind == "user"]
        for i, (kind, _) in enumerate(targets):
            t = torch.full(SHAPE, float(i))
            if kind in ("buffer", "object_of_buffer"):
                self.register_buffer(f"b{i}", t)
            if kind in ("object_of_buffer", "object"):
                self.holder.tensors[i] = t

    def forward(self, x, p, *users):
        total = x.sum()
        for i, (kind, write) in enumerate(self.targets):
            if kind == "user":
                t = users[self.users.index(i)]
            elif kind == "buffer":
                t = getattr(self, f"b{i}")
            else:
                t = self.holder.tensors[i]
            WRITES[write](t, x, p)
            total = total + t.sum()
        return total


targets = st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(sorted(WRITES))),
                   min_size=1, max_size=3)


def _expected_fqn(model, ep, i, kind):
    if kind in ("buffer", "object_of_buffer"):
        return f"b{i}"
    ptr = model.holder.tensors[i].data_ptr()
    names = [n for n, c in ep.constants.items() if c.data_ptr() == ptr]
    assert len(names) == 1, names
    return names[0]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(targets)
def test_every_in_place_write_is_planned_or_refused(targets):
    model = Gen(targets).eval()
    x, p = torch.ones(1, 2, 1, 4), torch.tensor([3])
    users = tuple(torch.zeros(SHAPE) for _ in model.users)
    ep = torch.export.export(model, (x, p, *users), strict=False)
    user_writes = [i for i, (kind, _) in enumerate(targets) if kind == "user"]
    if user_writes:
        name = [s.arg.name for s in ep.graph_signature.input_specs
                if s.kind.name == "USER_INPUT"][2 + model.users.index(user_writes[0])]
        try:
            tte.plan_mutations(ep)
        except tte.PlanError as e:
            assert f"user input {name!r} is written in place" in str(e)
            assert "register_buffer" in str(e)
            return
        raise AssertionError(f"user input {name!r} is written in place but was planned")
    plan = tte.plan_mutations(ep)
    expected = {_expected_fqn(model, ep, i, kind): kind for i, (kind, _) in enumerate(targets)}
    assert set(plan.fqns) == set(expected), str(plan)
    assert written_buffers(ep) == set(expected)   # read without functionalizing
    for fqn, kind in expected.items():
        lifted = plan[fqn].reason.startswith("module state lifted by torch.export as constant")
        assert lifted == (kind != "buffer"), plan[fqn].reason
    functional = functional_program(ep)
    mutated = set(functional.graph_signature.buffers_to_mutate.values())
    assert mutated == set(expected)
    if all(kind == "buffer" for kind in expected.values()):   # torch.export's own report
        assert mutated == set(ep.run_decompositions({}).graph_signature.buffers_to_mutate.values())
