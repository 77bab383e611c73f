"""One way to rebuild an ExportedProgram with new parts.

Invariant: `rebuilt(ep, **parts)` is an `ExportedProgram` equal to `ep` in every part not named
in `parts` — the same graph module, signature, state, constants, range constraints, module call
graph, example inputs and verifiers (all of them, as `ep` holds them: an edge program stays
checked by the edge verifier) — and holding exactly the named parts where named. The passes edit
a program's graph in place and then wrap it anew; they do it here, so no site forgets a part
(the example inputs, the verifiers) that a later stage reads. The class is looked up as
`torch.export.ExportedProgram` at each call, as upstream's own passes look it up: upstream's
tests stand it in to capture what a pass builds. `with_mutation_outputs` is the one way a pass
declares new state writes: after the program's own mutation outputs, before its user outputs, in
the graph's output and in the signature alike.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import (ExportGraphSignature, InputSpec, OutputKind,
                                          OutputSpec, TensorArgument)


def rebuilt(ep: ExportedProgram, *, graph_module: torch.fx.GraphModule | None = None,
            input_specs: Sequence[InputSpec] | None = None,
            output_specs: Sequence[OutputSpec] | None = None,
            state_dict: dict | None = None, constants: dict | None = None,
            module_call_graph: list | None = None) -> ExportedProgram:
    """`ep` with the named parts replaced (module docstring); a signature is rebuilt only when
    specs are named, from the named specs and `ep`'s others."""
    gm = ep.graph_module if graph_module is None else graph_module
    sig = ep.graph_signature
    if input_specs is not None or output_specs is not None:
        sig = ExportGraphSignature(
            input_specs=list(sig.input_specs if input_specs is None else input_specs),
            output_specs=list(sig.output_specs if output_specs is None else output_specs))
    return torch.export.ExportedProgram(
        root=gm, graph=gm.graph, graph_signature=sig,
        state_dict=ep.state_dict if state_dict is None else state_dict,
        range_constraints=ep.range_constraints,
        module_call_graph=ep.module_call_graph if module_call_graph is None else module_call_graph,
        example_inputs=ep.example_inputs,
        constants=ep.constants if constants is None else constants,
        verifiers=ep.verifiers)


def with_mutation_outputs(ep: ExportedProgram, gm: torch.fx.GraphModule,
                          writes: Sequence[tuple[torch.fx.Node, str]]) -> ExportedProgram:
    """`ep` on `gm` (its graph edited in place) with each (value, buffer fqn) of `writes` a
    BUFFER_MUTATION output, after the existing mutation outputs and before the user outputs."""
    sig, out = ep.graph_signature, gm.graph.output_node()
    n_mut = sum(1 for s in sig.output_specs if s.kind != OutputKind.USER_OUTPUT)
    old = list(out.args[0])
    out.args = (tuple(old[:n_mut] + [value for value, _ in writes] + old[n_mut:]),)
    gm.recompile()
    specs = [OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument(value.name), fqn)
             for value, fqn in writes]
    return rebuilt(ep, graph_module=gm, output_specs=list(sig.output_specs[:n_mut]) + specs
                   + list(sig.output_specs[n_mut:]))


__all__ = ["rebuilt", "with_mutation_outputs"]
