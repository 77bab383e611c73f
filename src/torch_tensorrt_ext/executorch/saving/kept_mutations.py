"""Save's structural check: every mutation a method declares is performed by the `.pte` program.

Invariant: `expected_writes(edge_manager)` reads, before `to_executorch`, which buffers each
method declares mutated and who writes each one (`Writes`: its engine in place — declared on the
buffer's own placeholder — or the program's write-back); `check_writes(et_manager, expected)`
returns only when, in the program ExecuTorch emits, every such buffer is still written: a
write-back is an op writing the buffer's placeholder in place — its schema marks the argument
mutable: an `aten.copy_` into it, an `et_copy._h2d_copy.out` into a buffer resident on the device,
a host custom op such as `llama::update_cache` — an engine's write needs the buffer's
placeholder handed to a delegate call whose blob records writing it (an aliased output, or an
output the delegate copies back into the buffer's input binding). A write lost in ExecuTorch's
lowering raises `PlanError` naming the method, the buffer and what is missing. The check reads
the graph, not the emitted signature's output names: ExecuTorch 1.5.1's write-back pass can pair
those names with the wrong buffer when in-place and written-back mutations mix (seen on Qwen3.5's
Gated DeltaNet layer), while the graph it runs is right.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind

from ...contracts.plan import PlanError


@dataclass(frozen=True)
class Writes:
    """One method's declared buffer mutations, by who writes them."""

    in_place: frozenset[str]      # FQNs an engine writes itself (declared on the placeholder)
    written_back: frozenset[str]  # FQNs the program writes back (ExecuTorch adds a copy_)


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
    out = {}
    for method in edge_manager.methods:
        ep = edge_manager.exported_program(method)
        sig = ep.graph_signature
        fqn_of = sig.inputs_to_buffers
        in_place = frozenset(fqn_of[name] for name in written_in_place(ep))
        mutated = frozenset(sig.buffers_to_mutate.values())
        out[method] = Writes(in_place, mutated - in_place)
    return out


def _names_in(args) -> set:
    names = set()
    for a in args:
        if isinstance(a, torch.fx.Node):
            names.add(a.name)
        elif isinstance(a, (list, tuple)):
            names |= _names_in(a)
    return names


def _staged(ep, name) -> str:
    """Why a buffer misses its delegate call, when ExecuTorch staged it host-to-device."""
    users = next((n.users for n in ep.graph_module.graph.nodes if n.name == name), {})
    if any("_h2d_copy" in str(u.target) for u in users):
        return (": the delegate is handed a host-to-device staged copy of it "
                "(et_copy._h2d_copy), so the engine's write lands in the copy")
    return ""


def _blob_writes(ep, call) -> frozenset[str]:
    """FQNs a TensorRTBackend delegate's blob says its delegate writes (aliased or copied back);
    another backend's delegate writes nothing this check can credit."""
    from ...contracts import blob as blobfmt
    lowered = getattr(ep.graph_module, call.args[0].target, None)
    if getattr(lowered, "backend_id", None) != "TensorRTBackend":
        return frozenset()
    return frozenset(blobfmt.parse(lowered.processed_bytes).metadata.written_buffers().values())


def _written_args(node: torch.fx.Node) -> set[str]:
    """Names of the nodes `node` writes in place: the arguments its schema marks mutable
    (`Tensor(a!)`: `copy_`'s self, `llama::update_cache`'s cache, an out variant's `out`)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return set()
    written = set()
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = node.kwargs.get(arg.name) if arg.kwarg_only or i >= len(node.args) \
            else node.args[i]
        if isinstance(value, torch.fx.Node):
            written.add(value.name)
    return written


def check_writes(et_manager, expected: dict[str, Writes]) -> None:
    """Refuse a lowered program that no longer performs a declared buffer write."""
    for method, writes in expected.items():
        ep = et_manager.exported_program(method)
        placeholder = {fqn: name for name, fqn in ep.graph_signature.inputs_to_buffers.items()}
        copied, delegated, blob_written = set(), set(), set()
        for n in ep.graph_module.graph.nodes:
            if n.op != "call_function":
                continue
            if "call_delegate" in getattr(n.target, "__name__", ""):
                delegated |= _names_in(n.args[1:])
                blob_written |= _blob_writes(ep, n)
            else:   # a write-back copy_, an _h2d_copy into a device buffer, an in-place op
                copied |= _written_args(n)
        for fqn in sorted(writes.written_back | writes.in_place):
            name = placeholder.get(fqn)
            if fqn in writes.written_back:
                ok, need = name in copied, "write-back copy_ (or other in-place write) into it"
            elif name not in delegated:
                ok, need = False, "delegate call taking it (its engine writes it)"
            else:
                ok, need = fqn in blob_written, ("delegate whose blob records writing it (no "
                                                 "aliased or copy_back output for its binding)")
            if not ok:
                raise PlanError(
                    f"method {method!r}: buffer {fqn!r} is declared mutated, but the ExecuTorch "
                    f"program has no {need} (buffer input {name!r}){_staged(ep, name)}; the "
                    ".pte would run with stale state. Please report this with the program")


__all__ = ["Writes", "check_writes", "expected_writes", "written_in_place"]
