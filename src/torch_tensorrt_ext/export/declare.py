"""`declare_mutations`: BUFFER_MUTATION output specs for the writes engines perform.

Invariant: after declaration every buffer the plan names has exactly one BUFFER_MUTATION spec,
paired with its buffer by fully qualified name, and the program is otherwise unchanged: inputs,
user outputs, constants, state dict, example inputs, range constraints, module call graph and
verifiers are carried over, and the result passes torch's ExportedProgram verifier. Where each
write is declared follows from the plan alone, from who copies it (`BufferWrite.copier`): a
write its engine performs itself (Copier.ENGINE: an aliased KV output, or a copy-back the engine
copies into the buffer) is declared on the buffer's own placeholder — an in-place lineage, so
ExecuTorch adds no write-back `copy_`; a new value the engine hands out (Copier.PROGRAM) is
declared on that output. The engines' own records are only cross-checked: a plan that disagrees
with them is refused, naming the buffer, engine and binding. Declaring twice equals declaring
once.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

import operator

from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind

from ..contracts.engine import EngineInfo
from ..contracts.plan import BufferWrite, Copier, MutationPlan, PlanError
from .engine_calls import EngineCall, engine_calls
from ..errors import ArgumentTypeError
from ..lowering.program_edit import with_mutation_outputs


def _check_engine(info: EngineInfo, call: EngineCall) -> None:
    reported = {(a.output, a.input) for a in info.aliased_io}
    written = set(call.aliased.items())
    if reported != written:
        raise PlanError(f"engine {info.name!r}: its signature aliases {sorted(written)} but the "
                        f"engine reports {sorted(reported)}; rebuild the program")


def _engine_record(call: EngineCall, output: str) -> str:
    if output in call.aliased:
        return f"aliases input {call.aliased[output]!r} (written in place)"
    if output in call.copied:
        return f"is copied into input {dict(call.copy_pairs).get(output)!r} by the engine itself"
    return "is handed out (for the program to write back)"


def _check_copier(w: BufferWrite, call: EngineCall) -> None:
    """The plan's copier against the engine's own record of output `w.output_binding`."""
    if w.output_binding not in call.output_names:
        raise PlanError(f"buffer {w.fqn!r}: engine {w.engine!r} has no output binding "
                        f"{w.output_binding!r} (outputs: {list(call.output_names)})")
    if w.is_kv:
        agrees = call.aliased.get(w.output_binding) == w.input_binding
    elif w.copier is Copier.ENGINE:
        agrees = (w.output_binding in call.copied
                  and dict(call.copy_pairs).get(w.output_binding) == w.input_binding)
    else:
        agrees = w.output_binding not in call.aliased and w.output_binding not in call.copied
    if not agrees:
        says = ("the engine writes it in place" if w.is_kv else
                "the engine copies it back itself" if w.copier is Copier.ENGINE else
                "the program writes it back")
        raise PlanError(
            f"buffer {w.fqn!r}: the plan says {says} ({w.kind.name}, copier {w.copier.name}, "
            f"input binding {w.input_binding!r}), but engine {w.engine!r} records that its "
            f"output binding {w.output_binding!r} {_engine_record(call, w.output_binding)}; "
            "declare with the plan the compile returned (module.mutation_plan), or compile again")


def _handed_out(nodes, call: EngineCall, w: BufferWrite):
    """The value engine `call` hands out as `w.output_binding`, as the program reads it."""
    node = nodes[call.node.name]   # the same call in the copied graph
    k = list(call.output_names).index(w.output_binding)
    items = [u for u in node.users  # export materialises a getitem per output, read or not
             if u.target is operator.getitem and u.args[1] == k and u.users]
    if not items:
        raise PlanError(f"buffer {w.fqn!r}: engine {w.engine!r} hands its new value out as "
                        f"{w.output_binding!r}, which nothing in the program reads")
    return items[0]


def _declare_one(ep: ExportedProgram, plan: MutationPlan,
                 engines: Iterable[EngineInfo]) -> ExportedProgram:
    sig = ep.graph_signature
    declared = {s.target for s in sig.output_specs if s.kind == OutputKind.BUFFER_MUTATION}
    todo = [w for w in plan if w.fqn not in declared]
    if not todo:
        return ep
    gm = copy.deepcopy(ep.graph_module)
    nodes = {n.name: n for n in gm.graph.nodes}
    placeholder_of = {fqn: nodes[name] for name, fqn in sig.inputs_to_buffers.items()}
    calls = engine_calls(ep)
    infos = {e.name: e for e in engines}
    writes = []
    for w in todo:
        if w.fqn not in placeholder_of:
            raise PlanError(f"buffer {w.fqn!r} is not an input of this program; cannot declare "
                            "its mutation")
        if w.engine is None:
            raise PlanError(f"buffer {w.fqn!r} is written outside any engine ({w.reason}) but the "
                            "program does not declare it; export the compiled module again")
        call = calls.get(w.engine)
        if call is None:
            raise PlanError(f"buffer {w.fqn!r} is written by engine {w.engine!r}, which this "
                            f"program does not call (engines: {sorted(calls)})")
        if w.engine in infos:
            _check_engine(infos[w.engine], call)
        _check_copier(w, call)
        if w.copier is Copier.ENGINE:
            value = placeholder_of[w.fqn]       # the engine writes the buffer itself
        else:
            value = _handed_out(nodes, call, w)  # the program's write-back copies it
        writes.append((value, w.fqn))
    return with_mutation_outputs(ep, gm, writes)


def declare_mutations(ep: ExportedProgram | Mapping[str, ExportedProgram],
                      plan: MutationPlan | Mapping[str, MutationPlan],
                      engines: Iterable[EngineInfo] | Mapping[str, Iterable[EngineInfo]] = ()):
    """Declare the plan's writes on `ep`; for a `{method: ExportedProgram}` mapping, per method
    (`plan` and `engines` then map method names too)."""
    if isinstance(ep, Mapping):
        if not isinstance(plan, Mapping):
            raise ArgumentTypeError("a multi-method program needs a {method: MutationPlan} mapping")
        missing = sorted(set(ep) - set(plan))
        if missing:
            raise PlanError(f"no plan for methods {missing}")
        eng = engines if isinstance(engines, Mapping) else {}
        return {name: _declare_one(p, plan[name], eng.get(name, ())) for name, p in ep.items()}
    return _declare_one(ep, plan, engines)
