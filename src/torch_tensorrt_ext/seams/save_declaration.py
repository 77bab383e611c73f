"""The `torch_tensorrt.save` seam: every exported program leaves with every mutation declared.

Invariant: `declare_program(ep)` returns a program in which every buffer the compiled module
writes has exactly one BUFFER_MUTATION spec, paired by buffer FQN: a write an engine performs in
place (its aliased I/O) or copies back itself (a reference engine's `copy_back`) is declared on
the buffer's own placeholder (no write-back copy), any other copy-back write on the value that
reaches it — whether torch.export already functionalized the module's `aten.copy_` or an
exporter left that `copy_` in the graph (torch-tensorrt's legacy exporter does). The engines'
records are read once, into a plan that says who copies each write (`aliased_plan`), and the
declaration follows that plan. Running it again changes nothing. An engine aliasing an input
that is not a registered buffer is refused, naming the engine, binding and input.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind
from torch.fx import Node

from ..export.declare import declare_mutations
from ..export.engine_calls import aliased_plan
from ..contracts.plan import PlanError
from ..lowering.program_edit import with_mutation_outputs

__all__ = ["aliased_plan", "declare_program", "functionalize_buffer_copies"]


def _in_place_copies(ep: ExportedProgram, graph) -> list[tuple[Node, str]]:
    """`aten.copy_(buffer, value)` nodes an exporter left in the graph, with the buffer FQN."""
    buffers = ep.graph_signature.inputs_to_buffers
    found = []
    for n in graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.aten.copy_.default \
                and isinstance(n.args[0], Node) and n.args[0].name in buffers and not n.users:
            found.append((n, buffers[n.args[0].name]))
    return found


def functionalize_buffer_copies(ep: ExportedProgram) -> ExportedProgram:
    """Turn trailing in-place buffer copies into BUFFER_MUTATION outputs (same program)."""
    if not _in_place_copies(ep, ep.graph_module.graph):
        return ep
    gm = copy.deepcopy(ep.graph_module)  # the caller's program is never edited
    copies = _in_place_copies(ep, gm.graph)
    sig = ep.graph_signature
    declared = {s.target for s in sig.output_specs if s.kind == OutputKind.BUFFER_MUTATION}
    writes = []
    for node, fqn in copies:
        if fqn in declared:
            raise PlanError(f"buffer {fqn!r} is written twice: by {node.name} and by an existing "
                            "BUFFER_MUTATION; one write per buffer per call is supported")
        declared.add(fqn)
        writes.append((_not_another_buffer(gm.graph, node, sig), fqn))
        gm.graph.erase_node(node)
    return with_mutation_outputs(ep, gm, writes)


def _not_another_buffer(graph, copy_node: Node, sig) -> Node:
    """The value `copy_node` writes, cloned where it is another buffer's own placeholder (a buffer
    copied whole from one no call writes, now an engine input): ExecuTorch's write-back pass takes
    a mutation whose value is any buffer's placeholder for an in-place one and adds no copy, so
    the write would be lost."""
    value = copy_node.args[1]
    if not (isinstance(value, Node) and value.op == "placeholder"
            and value.name in sig.inputs_to_buffers):
        return value
    with graph.inserting_before(copy_node):
        clone = graph.call_function(torch.ops.aten.clone.default, (value,))
    clone.meta.update({k: v for k, v in value.meta.items() if k == "val"})
    return clone


def declare_program(ep: ExportedProgram,
                    upstream_copyback: Sequence[str] | None = None) -> ExportedProgram:
    """`ep` with every mutation declared once by buffer name. `upstream_copyback`: the buffers
    torch-tensorrt's own lifting helpers recorded as copy-back (`_copyback_mutation_buffers`,
    positional trailing outputs); a module lifted that way, not compiled by the patched
    `compile`, carries writes this declaration cannot see — each one not declared here is
    refused naming it, instead of a saved program that silently drops the write."""
    ep = functionalize_buffer_copies(ep)
    ep = declare_mutations(ep, aliased_plan(ep))
    declared = {s.target for s in ep.graph_signature.output_specs
                if s.kind == OutputKind.BUFFER_MUTATION}
    lost = [b for b in (upstream_copyback or ()) if b not in declared]
    if lost:
        raise PlanError(
            f"buffer {lost[0]!r} is written (torch-tensorrt's lifting helpers recorded it in "
            "gm.meta['_copyback_mutation_buffers'] as a trailing graph output), but the module "
            "was not compiled by the patched torch_tensorrt.compile, so nothing declares the "
            "write and the saved program would drop it. Compile the model with "
            "torch_tensorrt.compile, which plans, lifts and declares every buffer write")
    return ep
