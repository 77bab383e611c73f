"""Find every buffer write of a torch.export program, in functional form.

Invariant: `find_buffer_writes` returns exactly one `FoundWrite` per buffer that eager execution
of the program mutates, whatever form the program came in:

* an `ExportedProgram` in functional form (BUFFER_MUTATION output specs),
* an `ExportedProgram` in torch 2.14's default training IR, which keeps in-place ops
  (`copy_` into a slice, `index_copy_`, `add_`, ...) inside the graph — it is functionalized
  first, so each write is seen as the value the converters will see,
* a `GraphModule` from `ExportedProgram.module()`: buffers are `get_attr` nodes and each write
  is a trailing whole-buffer `aten.copy_(get_attr, value)`; one with other in-place writes into
  buffers is re-exported to functional form.

A write it cannot represent raises `PlanError` naming the node; it never drops one. An
ExportedProgram is functionalized at most once: `functional_form` keeps its result for as long
as the program object lives (and its graph is the one it was computed from), so planning and
lifting the same program share one `run_decompositions`.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch._ops import HigherOrderOperator
from torch.fx import GraphModule, Node

from ..contracts.plan import PlanError
from .mutated_inputs import Origins, inputs_as_state, written_inputs
from .op_writes import hidden_roots, hides_write, view_root, written_roots

Program = torch.export.ExportedProgram | GraphModule


@dataclass(frozen=True)
class FoundWrite:
    """Buffer `fqn` (read through `root`) gets the new value `value`.

    `copy_node` is the whole-buffer `aten.copy_` that stores it (GraphModule form), else None.
    """

    fqn: str
    root: Node
    value: Node
    copy_node: Node | None = None
    # constants torch.export lifted this state as (see mutated_inputs)
    lifted_as: tuple[str, ...] = ()


def ep_writes(ep: torch.export.ExportedProgram, origins: Origins) -> list[FoundWrite]:
    sig = ep.graph_signature
    placeholders = {n.name: n for n in ep.graph_module.graph.nodes if n.op == "placeholder"}
    output = ep.graph_module.graph.output_node()
    values = list(output.args[0])
    root_of = {fqn: name for name, fqn in sig.inputs_to_buffers.items()}
    writes = []
    for i, spec in enumerate(sig.output_specs):
        if spec.kind != torch.export.graph_signature.OutputKind.BUFFER_MUTATION:
            continue
        fqn = spec.target
        root_name = root_of.get(fqn)
        if root_name is None or root_name not in placeholders:
            raise PlanError(f"BUFFER_MUTATION output {i} targets {fqn!r}, which is not a buffer "
                            "input of this program")
        value = values[i]
        if not isinstance(value, Node):
            raise PlanError(f"buffer {fqn!r} is assigned the constant {value!r}; nothing to plan")
        writes.append(FoundWrite(fqn, placeholders[root_name], value,
                                 lifted_as=origins.get(fqn, ())))
    return writes


def _inplace_buffer_writes(ep: torch.export.ExportedProgram) -> tuple[dict[str, str], bool]:
    """The buffers `ep` writes in place (FQN -> the first node writing it, first written first;
    `written_inputs`), and whether a write is out of fx's sight: a higher-order op (cond,
    while_loop, the `wrap_with_set_grad_enabled` a `with torch.no_grad():` block becomes, ...)
    takes a buffer or a view of one, in any argument position — what it writes inside is not
    looked into here —, or an op writes a buffer its schema does not declare (`hides_write`:
    train-mode `batch_norm`'s running statistics)."""
    names = ep.graph_signature.inputs_to_buffers  # a property that rebuilds a dict: read once
    written = {names[ph]: node.name for ph, node in written_inputs(ep).items() if ph in names}
    buffers = {n for n in ep.graph_module.graph.find_nodes(op="placeholder") if n.name in names}
    calls = [n for n in ep.graph_module.graph.nodes if n.op == "call_function"]
    hop = any(view_root(a) in buffers for node in calls
              if isinstance(node.target, HigherOrderOperator) for a in node.all_input_nodes)
    hidden = any(r in buffers for node in calls for r in hidden_roots(node))
    return written, hop or hidden


def buffer_writers(program: Program) -> dict[str, str]:
    """FQN -> the name of a node writing it, for every buffer `program` writes — the set
    `find_buffer_writes` finds — without functionalizing an ExportedProgram in training IR: its
    in-place writes into buffers (and into constants planned as buffers, `inputs_as_state`)
    plus its BUFFER_MUTATION outputs. A program whose higher-order ops take buffers, or a
    GraphModule, is functionalized (the writer is then the node computing the new value)."""
    if isinstance(program, torch.export.ExportedProgram):
        state, _ = inputs_as_state(program)
        inplace, hop = _inplace_buffer_writes(state)
        if not hop:
            values = state.graph.output_node().args[0]
            out = dict(inplace)
            for i, spec in enumerate(state.graph_signature.output_specs):
                if spec.kind == torch.export.graph_signature.OutputKind.BUFFER_MUTATION:
                    out.setdefault(spec.target, getattr(values[i], "name", str(values[i])))
            return out
    return {w.fqn: w.value.name for w in find_buffer_writes(program)[1]}


def written_buffers(program: Program) -> frozenset[str]:
    """The FQNs of the buffers `program` writes (`buffer_writers`)."""
    return frozenset(buffer_writers(program))


def hides_writes(ep: torch.export.ExportedProgram) -> bool:
    """Whether a buffer write of `ep` happens inside a higher-order op or by an op whose schema
    does not declare it: fx's dead-code elimination treats such an op as pure, so a pass that
    cleans the graph up (torch-tensorrt's pre-lowering does) deletes the op, and the write with
    it, when nothing reads its result."""
    return _inplace_buffer_writes(ep)[1]


# program -> (the graph it was computed from, functional program, origins); an entry lives as
# long as its program object, and is only kept when the functional program is a new object
# (so the value never holds its own key alive)
_FUNCTIONAL: weakref.WeakKeyDictionary[torch.export.ExportedProgram, tuple] = \
    weakref.WeakKeyDictionary()


def _graph_key(ep: torch.export.ExportedProgram) -> tuple:
    gm = ep.graph_module
    return id(gm), id(gm.graph), len(gm.graph.nodes)


def functional_form(ep: torch.export.ExportedProgram
                    ) -> tuple[torch.export.ExportedProgram, Origins]:
    """The program in functional form (no in-place writes into buffers), with every written
    constant carried as a buffer (`mutated_inputs.inputs_as_state`), and where each such buffer
    came from. Computed once per program object: a second call (lifting what was planned)
    reuses the first's functional program instead of running the decompositions again. A
    program whose graph object or node count changed in between is functionalized again; one
    rewritten in place to the same node count is not told apart — plan and lift it unchanged."""
    key = _graph_key(ep)
    hit = _FUNCTIONAL.get(ep)
    if hit is not None and hit[0] == key:
        return hit[1], hit[2]
    functional, origins = _functional_form(ep)
    if functional is not ep:
        _FUNCTIONAL[ep] = (key, functional, origins)
    return functional, origins


def functional_program(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """`functional_form`'s program."""
    return functional_form(ep)[0]


def _functional_form(ep: torch.export.ExportedProgram
                     ) -> tuple[torch.export.ExportedProgram, Origins]:
    """`functional_form`, computed (no cache)."""
    state, origins = inputs_as_state(ep)
    return _functionalize(state), origins


def _decomposing_hidden_writes(ep: torch.export.ExportedProgram) -> dict:
    """The decompositions of the composite ops of `ep` that write an input their schema does not
    declare (`hides_write`), and no others: `run_decompositions({})` keeps a composite op with a
    functional schema whole (`instance_norm`; `batch_norm` it always decomposes), and its
    retracing deletes one whose result nothing reads — the running statistics' write with it;
    decomposed, the write is seen."""
    ops = {n.target for n in ep.graph_module.graph.nodes if hides_write(n)}
    if not ops:
        return {}
    table = torch.export.default_decompositions()   # one torch never keeps is not in it
    return {op: table[op] for op in ops if op in table}


def _functionalize(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    inplace, hop = _inplace_buffer_writes(ep)
    if not inplace and not hop:
        return ep
    try:
        return ep.run_decompositions(_decomposing_hidden_writes(ep))
    except Exception as e:  # pragma: no cover - depends on torch internals
        raise PlanError(f"could not functionalize the program's buffer writes: {e}") from e


def _buffer_fqn(gm: GraphModule, node: Node) -> str | None:
    if node.op != "get_attr":
        return None
    try:
        gm.get_buffer(node.target)
    except AttributeError:
        return None
    return str(node.target)


def gm_writes(gm: GraphModule) -> tuple[list[FoundWrite], list[Node]]:
    """Whole-buffer copy_ writes, and any other in-place write into a buffer."""
    writes: dict[str, FoundWrite] = {}
    other: list[Node] = []
    for node in gm.graph.nodes:
        for root in written_roots(node):
            fqn = _buffer_fqn(gm, root)
            if fqn is None:
                if root.op in ("placeholder", "get_attr"):
                    other.append(node)  # an input or a non-buffer tensor: never dropped
                continue
            whole = (node.target is torch.ops.aten.copy_.default
                     and node.args[0] is root and isinstance(node.args[1], Node))
            if whole and fqn not in writes:
                writes[fqn] = FoundWrite(fqn, root, node.args[1], node)
            else:
                other.append(node)
    return list(writes.values()), other


def example_args(gm: GraphModule) -> tuple:
    """Zero tensors shaped like the GraphModule's inputs (symbolic dims at their hints)."""
    from torch.fx.experimental.symbolic_shapes import guarding_hint_or_throw
    args = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise PlanError(
                f"GraphModule input {node.name!r} has no tensor meta['val']; its in-place buffer "
                "writes can only be planned from a traced graph — pass the ExportedProgram "
                "from torch.export instead")
        # a size simplified from a data-dependent expression (`u1 + s27 - u1`) has no
        # hint of its own; its expression's (s27's) is asked for
        shape = [s if isinstance(s, int) else int(guarding_hint_or_throw(s)) for s in val.shape]
        args.append(torch.zeros(shape, dtype=val.dtype))
    return tuple(args)


def find_buffer_writes(program: Program) -> tuple[Program, list[FoundWrite]]:
    """The (possibly functionalized) program and its buffer writes, first-written first."""
    if isinstance(program, torch.export.ExportedProgram):
        ep, origins = functional_form(program)
        return ep, ep_writes(ep, origins)
    if not isinstance(program, GraphModule):
        raise PlanError(f"plan_mutations takes an ExportedProgram or a GraphModule from "
                        f"torch.export, not {type(program).__name__}")
    writes, other = gm_writes(program)
    if not other:
        return program, writes
    # In-place writes into buffers other than a trailing whole copy_: re-export to functional.
    try:
        ep = torch.export.export(program, example_args(program), strict=False)
    except PlanError:
        raise
    except Exception as e:
        names = ", ".join(f"{n.name} ({n.target})" for n in other)
        raise PlanError(f"in-place buffer writes {names} could not be functionalized: {e}") from e
    ep, origins = _functional_form(ep)
    return ep, ep_writes(ep, origins)
