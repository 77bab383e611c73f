"""Every graph input an ExportedProgram writes in place is a buffer — or the program is refused.

Invariant: after `inputs_as_state(ep)`, every input the program writes in place (directly, through
a view, or by a custom op with a mutating schema) is a BUFFER input; nothing written is left as a
constant or a user input, so the plan sees every write:

* a lifted constant (`CONSTANT_TENSOR`) that shares its memory with a registered buffer — e.g.
  transformers' caches, held on a plain Python object *and* registered as buffers, which
  non-strict `torch.export` lifts twice — is merged into that buffer (one state, one name);
* a lifted constant written in place with no buffer behind it is module state held outside a
  registered buffer: it becomes a buffer of its own (its constant FQN, its current value);
* a user input written in place, a constant that is a partial view of a buffer, and a parameter
  written in place are refused with a `PlanError` that names the input and says what to do.

`StateOrigin` says, per resulting buffer, which constants it came from, so the plan's reason can
say so. Programs without such inputs are returned unchanged (the same object).
"""
from __future__ import annotations

import copy

import torch
from torch.export.graph_signature import InputKind, InputSpec, OutputKind, TensorArgument
from torch.fx import Node

from ..contracts.plan import PlanError
from .op_writes import written_roots
from .program_edit import rebuilt

Origins = dict[str, tuple[str, ...]]   # buffer fqn -> constant fqns it was lifted as


def written_inputs(ep: torch.export.ExportedProgram) -> dict[str, Node]:
    """Placeholder name -> the first node writing it in place (through views too)."""
    phs = {n for n in ep.graph_module.graph.nodes if n.op == "placeholder"}
    out: dict[str, Node] = {}
    for node in ep.graph_module.graph.nodes:
        for root in written_roots(node):
            if root in phs:
                out.setdefault(root.name, node)
    return out


def _tensor_of(ep: torch.export.ExportedProgram, spec: InputSpec) -> torch.Tensor | None:
    t = ep.constants.get(spec.target)
    if t is None:
        t = ep.state_dict.get(spec.target)
    return t if isinstance(t, torch.Tensor) else None


def _key(t: torch.Tensor):
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()),
            t.dtype)


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
            and a.untyped_storage().nbytes() > 0)


def _refuse_user_and_parameter_writes(ep, written: dict[str, Node]) -> None:
    sig = ep.graph_signature
    for spec in sig.input_specs:
        if not isinstance(spec.arg, TensorArgument) or spec.arg.name not in written:
            continue
        node = written[spec.arg.name]
        if spec.kind is InputKind.USER_INPUT:
            raise PlanError(
                f"user input {spec.arg.name!r} is written in place by {node.name!r} "
                f"({node.target}); a compiled engine cannot update the caller's tensor. Keep the "
                "state in a registered buffer (module.register_buffer) and write that, or return "
                "the new value as an output")
        if spec.kind is InputKind.PARAMETER:
            raise PlanError(
                f"parameter {spec.target!r} is written in place by {node.name!r} ({node.target}); "
                "state that changes per call must be a buffer: register it with register_buffer")
    for i, spec in enumerate(sig.output_specs):
        if spec.kind is OutputKind.USER_INPUT_MUTATION:
            raise PlanError(
                f"user input {spec.target!r} is mutated by the program (output {i}); a compiled "
                "engine cannot update the caller's tensor. Keep the state in a registered buffer "
                "(module.register_buffer) and write that, or return the new value as an output")


def inputs_as_state(ep: torch.export.ExportedProgram
                    ) -> tuple[torch.export.ExportedProgram, Origins]:
    """The program with every in-place-written constant turned into (or merged with) a buffer."""
    written = written_inputs(ep)
    _refuse_user_and_parameter_writes(ep, written)
    sig = ep.graph_signature
    consts = [s for s in sig.input_specs if s.kind is InputKind.CONSTANT_TENSOR
              and isinstance(s.arg, TensorArgument) and _tensor_of(ep, s) is not None]
    if not any(s.arg.name in written for s in consts):
        return ep, {}
    buffers = {}
    for s in sig.input_specs:
        t = _tensor_of(ep, s) if s.kind is InputKind.BUFFER else None
        if t is not None:
            buffers.setdefault(_key(t), s)
    merge: dict[str, InputSpec] = {}       # constant placeholder -> buffer spec it aliases
    promote: list[InputSpec] = []
    promoted_by_key: dict[tuple, InputSpec] = {}
    for s in consts:
        t = _tensor_of(ep, s)
        same = buffers.get(_key(t))
        if same is not None:
            merge[s.arg.name] = same
            continue
        if s.arg.name not in written:
            continue
        partial = [b for b in buffers.values() if _overlaps(t, _tensor_of(ep, b))]
        if partial:
            raise PlanError(
                f"constant {s.target!r} is written in place by {written[s.arg.name].name!r} and "
                f"is a partial view of buffer {partial[0].target!r}; register the written tensor "
                "itself as a buffer (or write through the buffer) so its state has one name")
        first = promoted_by_key.get(_key(t))
        if first is not None:
            merge[s.arg.name] = first
        else:
            promoted_by_key[_key(t)] = s
            promote.append(s)
    return _rewrite(ep, merge, promote)


def _rewrite(ep, merge: dict[str, InputSpec], promote: list[InputSpec]):
    gm = copy.deepcopy(ep.graph_module)
    phs = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    origins: dict[str, list[str]] = {}
    constant_of = {s.arg.name: s.target for s in ep.graph_signature.input_specs
                   if isinstance(s.arg, TensorArgument)}
    for c_name, target in merge.items():
        phs[c_name].replace_all_uses_with(phs[target.arg.name])
        gm.graph.erase_node(phs[c_name])
        origins.setdefault(target.target, []).append(constant_of[c_name])
    promoted = {s.arg.name for s in promote}
    specs = []
    constants = dict(ep.constants)
    state_dict = dict(ep.state_dict)
    for s in ep.graph_signature.input_specs:
        if isinstance(s.arg, TensorArgument) and s.arg.name in merge:
            continue
        if isinstance(s.arg, TensorArgument) and s.arg.name in promoted:
            state_dict[s.target] = constants.pop(s.target).detach().clone()
            specs.append(InputSpec(InputKind.BUFFER, s.arg, s.target, persistent=True))
            origins.setdefault(s.target, []).append(s.target)
            continue
        specs.append(s)
    used = {s.target for s in specs if s.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ)
            or (s.kind is InputKind.BUFFER and s.persistent is False)}
    for name in [n for n in constants if n not in used]:
        constants.pop(name)
    for table in (constants, state_dict):   # state carries no autograd history
        for name, t in table.items():
            if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter) \
                    and t.requires_grad:
                table[name] = t.detach()
    gm.graph.lint()
    gm.recompile()
    new = rebuilt(ep, graph_module=gm, input_specs=specs, state_dict=state_dict,
                  constants=constants, module_call_graph=copy.deepcopy(ep.module_call_graph))
    return new, {k: tuple(v) for k, v in origins.items()}
