"""The compiled module's final form: buffers as module state, who copies each copy-back write
decided (`lowering.copier.decide`) and recorded, engine results read as the engines return them,
and the model's own calling convention.

Invariant: after `to_module_form` every planned buffer is read through a `get_attr` of its FQN
and written exactly once per call — in place by its engine (KV), by the engine's own copy
(recorded in the engine, `engine_records.record_copy`), or by an `aten.copy_` the graph ends
with; a user output that is a written buffer returns its value before the call; every
higher-order op body a PyTorch partition calls is an attribute of the module too
(`bodies_held_on_top`), so an exporter inlining the partition finds it.
"""
from __future__ import annotations

import copy
import operator
from collections.abc import Mapping, Sequence

import torch
from torch.fx import GraphModule, Node

from ..contracts.plan import Copier, MutationPlan, PlanError
from ..lowering import LiftedGraph, copier
from .module_state import set_buffer
from ..engines import engine_module
from .engine_records import engine_modules, engines_are_side_effects, record_copy


def _old_values_kept(graph, user_outputs: list[object], getattrs: Mapping[str, Node],
                     written: Sequence[tuple[str, int]]) -> list[object]:
    """A user output that is a written buffer itself means the buffer's value *before* the call
    (the exported program's functional meaning; torch-tensorrt's lowering drops the `clone` that
    said so). Once the buffer is module state written in place, returning it would hand out the
    new value: such an output becomes a clone taken before anything writes the buffer."""
    written_fqns = {f for f, _ in written}
    clones: dict[Node, Node] = {}
    out = []
    for o in user_outputs:
        fqn = next((f for f, ga in getattrs.items() if ga is o), None)
        if fqn is not None and fqn in written_fqns:
            if o not in clones:
                with graph.inserting_after(o):
                    clones[o] = graph.call_function(torch.ops.aten.clone.default, (o,))
                clones[o].meta.update(o.meta)
            o = clones[o]
        out.append(o)
    return out


def to_module_form(gm: GraphModule, lifted: LiftedGraph, plan: MutationPlan) -> MutationPlan:
    """Buffers become module state read through get_attr; aliased writes stay in the engines;
    who copies each copy-back write is decided (`copier.decide`, on the graph before any
    write-back exists) and recorded in the engine (`record_copy`) and in the returned plan
    (`engine_copies`, with the decision's reason); a write the program copies, or a TensorRT
    engine's (its runtime in PyTorch cannot copy), is an `aten.copy_` into its buffer before the
    graph returns."""
    graph = gm.graph
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    out_node = graph.output_node()
    getattrs: dict[str, Node] = {}
    for fqn, tensor in lifted.initial_values:
        set_buffer(gm, fqn, tensor.clone())
    for fqn, ph_name in lifted.buffer_inputs:
        ph = placeholders.get(ph_name)
        with graph.inserting_before(ph if ph is not None else out_node):
            ga = graph.get_attr(fqn)
        if ph is not None:
            ga.meta.update(ph.meta)
            ph.replace_all_uses_with(ga)
            graph.erase_node(ph)
        getattrs[fqn] = ga
    outs = list(out_node.args[0])   # read after the placeholders became get_attrs
    outs[:lifted.num_user_outputs] = _old_values_kept(graph, outs[:lifted.num_user_outputs],
                                                      getattrs, lifted.buffer_outputs)
    values = {fqn: outs[idx] for fqn, idx in lifted.buffer_outputs}
    decisions = {d.fqn: d for d in map(copier.decide, copier.sites(
        plan, values, getattrs, outs[:lifted.num_user_outputs]))}
    with graph.inserting_before(out_node):
        for fqn, idx in lifted.buffer_outputs:
            d = decisions.get(fqn)
            if d is None:
                continue   # written in place by its engine (KV)
            plan = plan.replace(fqn, reason=f"{plan[fqn].reason}; {d.why}",
                                engine_copies=d.copier is Copier.ENGINE)
            module = getattr(gm, d.engine) if d.engine else None
            if d.copier is Copier.ENGINE:
                record_copy(module, d.output, d.input)
                if engine_module.copies_in_pytorch(module):
                    continue   # the reference kernel copies it in PyTorch as in the delegate
            # torch-tensorrt's runtime cannot copy into a buffer: in PyTorch the module writes
            # the value back itself (the ExecuTorch delegate reads the engine's record instead)
            copy_ = graph.call_function(torch.ops.aten.copy_.default, (getattrs[fqn], outs[idx]))
            copy_.meta["val"] = getattrs[fqn].meta.get("val")
    out_node.args = (tuple(outs[:lifted.num_user_outputs]),)
    engines_are_side_effects(gm)
    graph.eliminate_dead_code()
    graph.lint()
    gm.recompile()
    return plan


def engine_results_as_returned(gm: GraphModule) -> None:
    """Read each TensorRT engine's results the way its module returns them. The module (ours
    without a device, upstream's `forward` with one) drops the aliased outputs after its last
    user output (`user_output_count`) and returns a lone remaining output bare — while the graph
    indexes the call (`getitem(call, 0)`) whenever the partition returned several values, a KV
    write's new value among them. Left so, a 0-dim result fails the save's retrace ("invalid
    index of a 0-dim tensor") and a `[1, ...]` one is silently sliced. A read of a dropped
    output cannot be served and is refused naming engine and output."""
    changed = False
    for name, module in engine_modules(gm).items():
        kept = engine_module.returned_outputs(module)
        if kept is None:
            continue   # it returns what the graph reads
        names = list(module.output_binding_names)
        for call in (n for n in gm.graph.nodes if n.op == "call_module" and n.target == name):
            for use in list(call.users):
                if use.target is not operator.getitem:
                    continue
                k = use.args[1]
                if k >= kept:
                    raise PlanError(
                        f"engine {name!r}: the graph reads its output {names[k]!r} (result "
                        f"{k}), which the engine module does not return: it returns only the "
                        f"first {kept} of {names} (the rest are aliased outputs, written in "
                        "place). Please report this with the program")
                if kept == 1:
                    use.replace_all_uses_with(call)
                    gm.graph.erase_node(use)
                    changed = True
            val = call.meta.get("val")
            if kept == 1 and isinstance(val, (list, tuple)) and len(val) > 1:
                call.meta["val"] = [val[0]]   # a single-result call, as torch-tensorrt keeps one
    if changed:
        gm.recompile()


def sizes_read_from_inputs(gm: GraphModule) -> None:
    """A reference engine's results that are its inputs' sizes (a partition handing a dynamic
    length on, `size_outputs`) are read in the graph itself — `aten.sym_size.int` of the
    argument — and the engine returns only its tensors, so every exporter sees an engine call
    that returns tensors (as a TensorRT engine's bindings are)."""
    changed = False
    for name, module in engine_modules(gm).items():
        if not engine_module.size_outputs(module):
            continue
        sizes = {pos: (i, d) for pos, i, d in engine_module.size_outputs(module)}
        n = module.n_graph_outputs
        tensor_index = {}
        for pos in range(n):
            if pos not in sizes:
                tensor_index[pos] = len(tensor_index)
        for call in (c for c in gm.graph.nodes if c.op == "call_module" and c.target == name):
            users = list(call.users)
            if any(u.target is not operator.getitem for u in users):
                raise PlanError(f"engine {name!r}: its results are read other than by index; "
                                "please report this with the program")
            for use in users:
                k = use.args[1]
                if k in sizes:
                    i, d = sizes[k]
                    with gm.graph.inserting_before(use):
                        size = gm.graph.call_function(torch.ops.aten.sym_size.int,
                                                      (call.args[i], d))
                    size.meta.update(use.meta)
                    use.replace_all_uses_with(size)
                    gm.graph.erase_node(use)
                else:
                    use.args = (call, tensor_index[k])
            val = call.meta.get("val")
            if isinstance(val, (list, tuple)):
                call.meta["val"] = [v for k, v in enumerate(val) if k not in sizes]
        engine_module.sizes_read_in_graph(module)
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()


def bodies_held_on_top(gm: GraphModule) -> None:
    """Hold every higher-order op body (a `torch.cond` branch, a `map` body) that a PyTorch
    partition (`_run_on_gpu_N`) calls through `get_attr` on the compiled module itself too,
    under a name unique there (`<partition>_<body>`), and make the partition read it by that
    name. Every exporter inlines a PyTorch partition by copying its graph into the module's
    (torch-tensorrt's `inline_torch_modules`): the copied `get_attr` then names an attribute of
    the module, which — held only by the partition — did not exist ("Node true_graph_0 ...
    references nonexistent attribute"), so no program with such an op in a PyTorch partition
    could be saved through `torch_tensorrt.dynamo.export` (a dynamic length's save path, and
    every `tte.reference.export`). The partition runs as before (the same body objects)."""
    for name, child in list(gm.named_children()):
        if not isinstance(child, GraphModule) or not name.startswith("_run_on_gpu"):
            continue
        changed = False
        for node in child.graph.find_nodes(op="get_attr"):
            body = getattr(child, node.target, None)
            if not isinstance(body, GraphModule) or "." in node.target:
                continue
            top = f"{name}_{node.target}"
            if getattr(gm, top, body) is not body:
                raise PlanError(f"partition {name!r}: the compiled module already holds an "
                                f"attribute {top!r}; please report this with the program")
            gm.add_submodule(top, body)
            child.add_submodule(top, body)
            node.target = top
            changed = True
        if changed:
            child.delete_all_unused_submodules()
            child.recompile()


def calling_convention_of(gm: GraphModule, codegen: object) -> None:
    """Take the exported module's own calling convention (its pytree of inputs and outputs,
    `codegen`): the compiled module is called, and returns, exactly like the model it was
    compiled from."""
    if isinstance(codegen, torch.fx.graph._PyTreeCodeGen):
        gm.graph._codegen = copy.deepcopy(codegen)
        gm.recompile()


__all__ = ["to_module_form", "engine_results_as_returned", "sizes_read_from_inputs",
           "bodies_held_on_top", "calling_convention_of"]
