"""Which buffers each method of a program about to be lowered declares mutated, and who writes
each: decided once per save and read by every stage that needs it.

Invariant: `expected_writes(edge_manager)` reads, before `to_executorch`, for every method the
buffers its signature declares mutated, split by who writes them (`Writes`): an engine in place —
the mutation declared on the buffer's own placeholder (`written_in_place`: an aliased KV output,
or a delegate's own copy-back) — or the program's write-back. The save computes it once
(`config.stateful_edge`) and hands it to the backend config (which buffers stay on the device)
and to the one checker of the saved program (`inspecting.verify_writes`); nothing derives it
again.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind


@dataclass(frozen=True)
class Writes:
    """One method's declared buffer mutations, by who writes them."""

    in_place: frozenset[str]      # FQNs an engine writes itself (declared on the placeholder)
    written_back: frozenset[str]  # FQNs the program writes back (ExecuTorch adds a copy_)

    @property
    def mutated(self) -> frozenset[str]:
        return self.in_place | self.written_back


def written_in_place(ep: ExportedProgram) -> set[str]:
    """Placeholders of buffers whose mutation is declared on the buffer itself (an engine writes
    them: aliased KV, or a delegate's own copy-back)."""
    sig = ep.graph_signature
    values = list(ep.graph_module.graph.output_node().args[0])
    by_fqn = {fqn: name for name, fqn in sig.inputs_to_buffers.items()}
    return {by_fqn[s.target] for i, s in enumerate(sig.output_specs)
            if s.kind == OutputKind.BUFFER_MUTATION and s.target in by_fqn
            and getattr(values[i], "name", None) == by_fqn[s.target]}


def expected_writes(edge_manager) -> dict[str, Writes]:
    """Method -> its declared writes, by who writes them (module docstring)."""
    out = {}
    for method in edge_manager.methods:
        ep = edge_manager.exported_program(method)
        sig = ep.graph_signature
        fqn_of = sig.inputs_to_buffers
        in_place = frozenset(fqn_of[name] for name in written_in_place(ep))
        mutated = frozenset(sig.buffers_to_mutate.values())
        out[method] = Writes(in_place, mutated - in_place)
    return out


__all__ = ["Writes", "expected_writes", "written_in_place"]
