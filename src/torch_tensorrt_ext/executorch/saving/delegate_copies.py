"""A TensorRT engine's copy-back writes in a `.pte`: the delegate copies those its record names.

In PyTorch a compiled module writes a TensorRT engine's copy-back value back with `aten.copy_`
(torch-tensorrt's runtime cannot copy into a buffer). In a `.pte` the delegate can: one
device-to-device copy after the engine, on its stream, which keeps the buffer in device memory
beside the KV caches — instead of ExecuTorch's host write-back (3 copies, 2 of them over PCIe).

Invariant: this module decides nothing. Which writes a delegate copies was decided once, at
compile (`lowering.copier.decide`), and recorded in each engine's own record
(`engines.engine_module.record_copy`; patch 0004 packs it into its serialized metadata).
`hand_copy_backs_to_delegates(ep)`, run on the declared programs torch-tensorrt's ExecuTorch
export staged, reads those records (`export.engine_calls`) and removes the program's write-back
of exactly the buffers they name, declaring each on the buffer's own placeholder instead
(`export.engine_calls.aliased_plan`). A record that disagrees with the
program — it names an input that is not a buffer, or the program writes the buffer from another
value — is refused naming buffer, engine and binding; a write-back no record names stays, with a
warning at save that the buffer stays in host memory.
"""
from __future__ import annotations

import logging
import operator
from collections.abc import Mapping

from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind
from torch.fx import Node

from ...contracts.engine_call import schema_name
from ...contracts.plan import PlanError
from ...export.declare import declare_mutations
from ...export.engine_calls import aliased_plan, engine_calls, is_reference_call
from ...lowering.program_edit import rebuilt

__all__ = ["hand_copy_backs_to_delegates", "recorded_copies"]

_PLACEHOLDER_OP = "tensorrt::no_op_placeholder_for_execute_engine"
_log = logging.getLogger("torch_tensorrt_ext")


def recorded_copies(ep: ExportedProgram) -> dict[str, tuple[str, Node, str, str]]:
    """Buffer FQN -> (engine, call, output, input) for every copy a TensorRT engine's record says
    its delegate makes; a record naming an input that is not a registered buffer is refused."""
    buffers = ep.graph_signature.inputs_to_buffers
    found: dict[str, tuple[str, Node, str, str]] = {}
    for call in engine_calls(ep).values():
        if is_reference_call(call.node):
            continue   # its copies are declared on the buffer's placeholder at save already
        for out, inp in call.copy_pairs:
            arg = call.argument(inp)
            fqn = buffers.get(getattr(arg, "name", None))
            if fqn is None:
                raise PlanError(f"engine {call.name!r} records that its delegate copies output "
                                f"{out!r} into input {inp!r}, which is not a registered buffer "
                                f"({getattr(arg, 'name', arg)}); compile the model again")
            if fqn in found:
                raise PlanError(f"buffer {fqn!r} is copied into by engine {found[fqn][0]!r} and "
                                f"by engine {call.name!r}; one writer per buffer")
            found[fqn] = (call.name, call.node, out, inp)
    return found


def _strip_write_backs(ep: ExportedProgram, copies: Mapping[str, tuple[str, Node, str, str]]
                       ) -> list[int]:
    """Output positions of the write-backs of the buffers in `copies`, each checked to write the
    very output the engine's record names."""
    sig = ep.graph_signature
    outputs = list(ep.graph_module.graph.output_node().args[0])
    engines = engine_calls(ep)
    gone = []
    for i, s in enumerate(sig.output_specs):
        if s.kind != OutputKind.BUFFER_MUTATION or s.target not in copies:
            continue
        engine, call, out, _inp = copies[s.target]
        value = outputs[i]
        if value.op == "placeholder":
            continue                       # declared in place already
        k = list(engines[engine].output_names).index(out)
        if not (value.target is operator.getitem and value.args[0] is call and value.args[1] == k):
            raise PlanError(f"buffer {s.target!r}: engine {engine!r} records that its delegate "
                            f"copies output {out!r} (result {k}) into it, but the program writes "
                            f"it from {value.name}; compile the model again")
        gone.append(i)
    return gone


def _warn_host_write_backs(ep: ExportedProgram) -> None:
    if not any(schema_name(n) == _PLACEHOLDER_OP for n in ep.graph_module.graph.nodes):
        return                                   # not a device program
    outputs = list(ep.graph_module.graph.output_node().args[0])
    for i, s in enumerate(ep.graph_signature.output_specs):
        if s.kind == OutputKind.BUFFER_MUTATION and outputs[i].op != "placeholder":
            _log.warning("buffer %r stays in host memory, written back by the program (each call "
                         "stages it to the engine and fetches its new value); the compiled "
                         "module's mutation_plan says why", s.target)


def _hand_over(ep: ExportedProgram) -> ExportedProgram:
    copies = recorded_copies(ep)
    gone = set(_strip_write_backs(ep, copies)) if copies else set()
    if not gone:
        _warn_host_write_backs(ep)
        return ep
    gm = ep.graph_module          # the export's staged copy: edited, then wrapped anew
    sig = ep.graph_signature
    out = gm.graph.output_node()
    keep = [i for i in range(len(sig.output_specs)) if i not in gone]
    out.args = (tuple(out.args[0][i] for i in keep),)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    stripped = rebuilt(ep, graph_module=gm, output_specs=[sig.output_specs[i] for i in keep])
    # the engines' records say who writes each: declared on the buffer's own placeholder
    declared = declare_mutations(stripped, aliased_plan(stripped))
    _warn_host_write_backs(declared)
    return declared


Programs = ExportedProgram | Mapping[str, ExportedProgram]


def hand_copy_backs_to_delegates(programs: Programs) -> Programs:
    """`programs` (one, or `{method: program}`) with every copy-back write a TensorRT engine's
    record names left to that engine's delegate (module docstring)."""
    if isinstance(programs, Mapping):
        return {name: _hand_over(p) for name, p in programs.items()}
    return _hand_over(programs)
