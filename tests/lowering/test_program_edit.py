"""`program_edit.rebuilt`: the one way an ExportedProgram is rebuilt keeps every part it is not
told to replace (the example inputs and verifiers that hand-written rebuilds used to drop)."""
import torch

from torch_tensorrt_ext.lowering.program_edit import rebuilt


class _Acc(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("acc", torch.zeros(3))

    def forward(self, x):
        self.acc.add_(x)
        return self.acc * 2


def _program():
    """A functional program: the write of `acc` is a BUFFER_MUTATION output."""
    return torch.export.export(_Acc(), (torch.ones(3),)).run_decompositions({}), None


def test_unnamed_parts_are_kept():
    ep, _ = _program()
    new = rebuilt(ep)
    assert new is not ep
    assert new.graph_module.code == ep.graph_module.code
    assert new.graph_signature is ep.graph_signature
    for table in ("state_dict", "constants"):     # the same tensors, not copies
        old, got = getattr(ep, table), getattr(new, table)
        assert got.keys() == old.keys() and all(got[k] is v for k, v in old.items())
    assert new.example_inputs == ep.example_inputs
    assert new.verifiers == ep.verifiers
    assert new.range_constraints == ep.range_constraints
    assert new.module_call_graph == ep.module_call_graph


def test_named_specs_replace_only_their_side():
    ep, _ = _program()
    sig = ep.graph_signature
    user_only = [s for s in sig.output_specs if s.kind.name == "USER_OUTPUT"]
    mutation = [s for s in sig.output_specs if s.kind.name == "BUFFER_MUTATION"]
    assert mutation and user_only      # the program writes `acc` and returns a value
    gm = ep.graph_module
    out = gm.graph.output_node()
    out.args = (tuple(out.args[0])[len(mutation):],)
    gm.recompile()
    new = rebuilt(ep, graph_module=gm, output_specs=user_only)
    assert new.graph_signature.output_specs == user_only
    assert new.graph_signature.input_specs == sig.input_specs
    assert new.graph_signature.buffers_to_mutate == {}


def test_named_state_replaces_state():
    ep, _ = _program()
    state = {k: v.clone() + 1 for k, v in ep.state_dict.items()}
    new = rebuilt(ep, state_dict=state)
    assert torch.equal(new.state_dict["acc"], torch.ones(3))
    assert torch.equal(ep.state_dict["acc"], torch.zeros(3))


def test_the_class_is_looked_up_per_call(monkeypatch):
    """Upstream's tests stand `torch.export.ExportedProgram` in to capture what a pass builds."""
    ep, _ = _program()
    seen = []

    class Capturing(torch.export.ExportedProgram):
        def __init__(self, **kw):
            seen.append(sorted(kw))
            super().__init__(**kw)

    monkeypatch.setattr(torch.export, "ExportedProgram", Capturing)
    assert isinstance(rebuilt(ep), Capturing) and len(seen) == 1
