"""Who copies a TensorRT engine's copy-back write in a `.pte`: the delegate, in the buffer's memory.

In PyTorch a compiled module writes a copy-back value back with `aten.copy_` (on a GPU, one device
copy). In a `.pte` that write-back is an ExecuTorch host kernel: the buffer then lives in host
memory and every call stages it to the device, fetches the new value and copies it on the host
(3 copies, 2 of them over PCIe). The TensorRT delegate can instead copy the engine's output into
the buffer itself — one device-to-device copy after the engine, on its stream — which keeps the
buffer in device memory beside the KV caches.

Invariant: `hand_copy_backs_to_delegates(ep)`, run on the declared programs torch-tensorrt's
ExecuTorch export staged (engine calls in their serialized form), hands a copy-back write to its
delegate exactly when the delegate can do it alone: the new value is output `k` of one TensorRT
engine call and nothing but the write-back reads it; the same call takes the buffer as an input
and nothing else in the program reads or writes the buffer; the output is neither aliased nor
dynamic and has the buffer's dtype and shape; and the call hands out another output the program
reads (a delegate returning nothing is dropped). The decision is recorded once, in the engine's
own record (its serialized metadata, `tensorrt_info.COPY_BACK_KEY`), and everything downstream
reads it there: the declaration (on the buffer's placeholder, `export.engine_calls.aliased_plan`),
the blob's `copy_back`, the runtime, `inspect`. Every other write keeps its write-back, and a
warning at save says per buffer what forces it (`Handover.why`).
"""
from __future__ import annotations

import base64
import logging
import operator
import pickle
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple, Union

from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, OutputKind
from torch.fx import Node

from ..contracts.dtypes import dtype_name
from ..export.declare import declare_mutations
from ..export.engine_calls import aliased_plan
from ..engines.tensorrt_info import COPY_BACK_KEY, SERIALIZED_METADATA_IDX

__all__ = ["Handover", "hand_copy_backs_to_delegates", "handovers"]

_PLACEHOLDER_OP = "tensorrt::no_op_placeholder_for_execute_engine"
_log = logging.getLogger("torch_tensorrt_ext")


@dataclass(frozen=True)
class Handover:
    """Buffer `fqn`'s copy-back write: handed to the delegate of `call` (output -> input), or
    kept as the program's write-back (`why` says what forces it; output/input then None)."""

    fqn: str
    call: Optional[Node]
    output: Optional[str] = None
    input: Optional[str] = None
    why: str = ""

    @property
    def handed(self) -> bool:
        return self.output is not None


def _schema(node: Node) -> str:
    s = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    return s.name if s is not None else ""


def _describe(node: Node) -> str:
    if node.op == "output":
        return "the program's outputs"
    return f"{node.target} ({node.name})" if node.op == "call_function" else node.name


def _decide(ep: ExportedProgram, fqn: str, value: Node, buffer: Node, user_values: set,
            infos: Dict[Node, object]) -> Handover:
    from ..engines.tensorrt_info import engine_info_from_serialized
    from torch_tensorrt.executorch.backend import _get_engine_info_for_node

    if value.target is not operator.getitem or _schema(value.args[0]) != _PLACEHOLDER_OP:
        return Handover(fqn, None, why=f"its new value is computed by {_describe(value)}, not "
                        "handed out by a TensorRT engine")
    call, k = value.args[0], value.args[1]
    if value in user_values or len(value.users) != 1:
        readers = [_describe(u) for u in value.users if u.op != "output"]
        if value in user_values:
            readers.append("the program's outputs (a user output)")
        return Handover(fqn, call, why=f"its new value is also read by {', '.join(readers)}")
    args = list(call.args[0])
    if args.count(buffer) != 1:
        return Handover(fqn, call, why=f"engine call {call.name} does not take the buffer as an "
                        "input")
    others = [u for u in buffer.users if u is not call]
    if others:
        return Handover(fqn, call, why="the buffer is also read by "
                        + ", ".join(_describe(u) for u in others))
    if call not in infos:   # each engine's record is decoded once per program
        infos[call] = engine_info_from_serialized(
            _get_engine_info_for_node(ep, call, metadata_only=True))
    info = infos[call]
    out, inp = info.output_names[k], info.input_names[args.index(buffer)]
    if any(a.output == out for a in info.aliased_io):
        return Handover(fqn, call, why=f"output {out!r} is aliased")
    val = buffer.meta.get("val")
    shape = tuple(info.output_shapes[k]) if info.output_shapes else None
    if shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
        return Handover(fqn, call, why=f"output {out!r} has no static shape ({shape}); the "
                        "delegate's copy needs one")
    if val is None or tuple(val.shape) != shape or \
            dtype_name(val.dtype) != info.output_dtypes[k]:
        return Handover(fqn, call, why=f"output {out!r} ({info.output_dtypes[k]} {list(shape)}) "
                        "is not the buffer's dtype and shape")
    read = [u for u in call.users if u is not value and u.target is operator.getitem
            and u.users]
    if not read:
        return Handover(fqn, call, why=f"engine call {call.name} hands out nothing else the "
                        "program reads (a delegate returning nothing is dropped)")
    return Handover(fqn, call, out, inp)


def handovers(ep: ExportedProgram) -> Tuple[Handover, ...]:
    """The decision for every copy-back write `ep` declares on a value (a write-back)."""
    sig = ep.graph_signature
    nodes = {n.name: n for n in ep.graph.nodes}
    placeholder = {fqn: nodes[name] for name, fqn in sig.inputs_to_buffers.items()}
    outputs = list(ep.graph.output_node().args[0])
    user_values = {outputs[i] for i, s in enumerate(sig.output_specs)
                   if s.kind == OutputKind.USER_OUTPUT}
    out, infos = [], {}
    for i, s in enumerate(sig.output_specs):
        if s.kind != OutputKind.BUFFER_MUTATION or s.target not in placeholder:
            continue
        value, buffer = outputs[i], placeholder[s.target]
        if value is buffer:
            continue                      # declared in place: its engine writes it already
        out.append(_decide(ep, s.target, value, buffer, user_values, infos))
    return tuple(out)


def _with_copy_back(encoded: str, pairs: List[Tuple[str, str]]) -> str:
    """The engine's serialized metadata with `pairs` added to its copy-back record. The metadata
    is this process's own export of the engine; it is decoded as torch-tensorrt decodes it."""
    meta = pickle.loads(base64.b64decode(encoded.encode("ascii")))
    meta[COPY_BACK_KEY] = list(meta.get(COPY_BACK_KEY, [])) + [list(p) for p in pairs]
    return base64.b64encode(pickle.dumps(meta)).decode("ascii")


def _hand_over(ep: ExportedProgram) -> ExportedProgram:
    decided = handovers(ep)
    if any(_schema(n) == _PLACEHOLDER_OP for n in ep.graph.nodes):   # a device program
        for h in decided:
            if not h.handed:
                _log.warning("buffer %r stays in host memory, written back by the program (each "
                             "call stages it to the engine and fetches its new value): %s",
                             h.fqn, h.why)
    handed = [h for h in decided if h.handed]
    if not handed:
        return ep
    gm = ep.graph_module          # the export's staged copy: edited, then wrapped anew
    by_call: Dict[Node, List[Tuple[str, str]]] = {}
    for h in handed:
        by_call.setdefault(h.call, []).append((h.output, h.input))
    slot = 1 + SERIALIZED_METADATA_IDX            # args: (inputs, *engine info slots)
    for call, pairs in by_call.items():
        args = list(call.args)
        args[slot] = _with_copy_back(args[slot], pairs)
        call.args = tuple(args)
    sig = ep.graph_signature
    gone = {h.fqn for h in handed}
    out = gm.graph.output_node()
    keep = [i for i, s in enumerate(sig.output_specs)
            if not (s.kind == OutputKind.BUFFER_MUTATION and s.target in gone)]
    out.args = (tuple(out.args[0][i] for i in keep),)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    specs = [sig.output_specs[i] for i in keep]
    stripped = ExportedProgram(
        root=gm, graph=gm.graph,
        graph_signature=ExportGraphSignature(list(sig.input_specs), specs),
        state_dict=ep.state_dict, range_constraints=ep.range_constraints,
        module_call_graph=ep.module_call_graph, example_inputs=ep.example_inputs,
        constants=ep.constants, verifiers=ep.verifiers)
    # the engines' records now say who writes each: declared on the buffer's own placeholder
    return declare_mutations(stripped, aliased_plan(stripped))


Programs = Union[ExportedProgram, Mapping[str, ExportedProgram]]


def hand_copy_backs_to_delegates(programs: Programs) -> Programs:
    """`programs` (one, or `{method: program}`) with every copy-back write its TensorRT delegate
    can copy itself handed to that delegate (module docstring)."""
    if isinstance(programs, Mapping):
        return {name: _hand_over(p) for name, p in programs.items()}
    return _hand_over(programs)
