"""`compile`: the CPU stand-in for `torch_tensorrt.dynamo.compile` with reference engines.

Invariant: the returned module computes what the exported program computes and, when called from
PyTorch, leaves every buffer exactly as eager would. Its graph has the shape torch-tensorrt
produces: mutated buffers are read through `get_attr`, each engine is one
`tte::execute_engine(inputs, engine, signature)` call, and an engine writes its buffer updates in
place — an aliased output (`IKVCacheUpdateLayer` stand-in) only where the plan predicted one and
the graph allows it (the cache is the engine's own input and nothing outside the engine reads the
buffer after the call); everything else falls back through `reconcile` to copy-back. A write whose
new value is needed outside its engine, or computed outside any engine, stays an ordinary
`aten.copy_` at the end of the graph.
"""
from __future__ import annotations

import copy
import operator
import warnings
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from torch.fx import GraphModule, Node

from ..executorch import blob as blobfmt
from ..lowering import lift_mutated_buffers, plan_mutations, reconcile
from ..lowering.classify import _normalize_ops
from ..lowering.graph_writes import functional_program
from ..lowering.kv_rules import INDEX_COPY, SLICE_SCATTER
from ..plan import MutationPlan, PlanError, WriteKind
from .execute_op import OP as EXECUTE_ENGINE, Signature, dtype_name
from .info import AliasedIO, EngineInfo
from .partition import partition
from .payload import to_executorch_program, use_kv_update_layers


@dataclass
class _Engine:
    call: Node
    sub: GraphModule
    inputs: List[str]
    outputs: List[str]
    aliased: List[Tuple[str, str]] = field(default_factory=list)      # (output, input)
    copy_back: List[Tuple[str, str]] = field(default_factory=list)    # (output, input)
    kv_nodes: List[str] = field(default_factory=list)
    buffers_in: List[Tuple[str, str]] = field(default_factory=list)   # (input binding, fqn)
    buffers_out: List[Tuple[str, str]] = field(default_factory=list)  # (output binding, fqn)


class CompiledModule(torch.nn.Module):
    """A compiled program: `forward(*user_inputs)`; `.gm` the engine graph, `.plan` the
    reconciled plan, `.engines` what each engine reports (`EngineInfo`)."""

    def __init__(self, gm: GraphModule, plan: MutationPlan, engines: Tuple[EngineInfo, ...]):
        super().__init__()
        self.gm = gm
        self.plan = plan
        self.engines = engines

    def forward(self, *args):
        out = self.gm(*args)
        return out[0] if isinstance(out, tuple) and len(out) == 1 else out


def _binding_io(nodes: List[Node], is_input: bool) -> List[blobfmt.IOBinding]:
    out = []
    for n in nodes:
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise PlanError(
                f"engine {'input' if is_input else 'output'} {n.name!r} is a "
                f"{type(val).__name__}, not a tensor; engine bindings are tensors, so the "
                "partitioner must keep symbolic scalars (.item(), sizes) in PyTorch — report this "
                "graph, or pass the op producing it in torch_executed_ops")
        out.append(blobfmt.IOBinding(n.name, dtype_name(val.dtype), tuple(int(s) for s in val.shape),
                                     is_input))
    return out


def _submodule_io(sub: GraphModule) -> Tuple[List[Node], List[Node]]:
    ins = [n for n in sub.graph.nodes if n.op == "placeholder"]
    outs = list(sub.graph.output_node().args[0])
    return ins, outs


def _order(gm: GraphModule) -> Dict[Node, int]:
    return {n: i for i, n in enumerate(gm.graph.nodes)}


def _reads_old_value_after(sub: GraphModule, cache: Node, write: Node) -> bool:
    """Whether a node inside the engine reads the cache's old value after `write` — an in-place
    update would change what it reads."""
    order = _order(sub)
    return any(u is not write and order[u] > order[write] for u in cache.users)


def _plan_engine_writes(gm: GraphModule, calls: List[Node], plan: MutationPlan,
                        buffer_ph: Dict[str, Node], value_of: Dict[str, Node],
                        user_outputs: List[Node]) -> List[_Engine]:
    """Decide, per engine, which buffer writes it performs in place (aliased or copy-back)."""
    order = _order(gm)
    returned = set(user_outputs)
    engines = []
    for call in calls:
        sub = getattr(gm, call.target)
        ins, outs = _submodule_io(sub)
        e = _Engine(call, sub, [n.name for n in ins], [n.name for n in outs])
        arg_pos = {a: i for i, a in enumerate(call.args)}
        for w in plan:
            ph = buffer_ph[w.fqn]
            if ph in arg_pos:
                e.buffers_in.append((e.inputs[arg_pos[ph]], w.fqn))
            value = value_of[w.fqn]
            if not (value.target is operator.getitem and value.args[0] is call):
                continue
            k = value.args[1]
            out_name = e.outputs[k]
            e.buffers_out.append((out_name, w.fqn))
            if ph not in arg_pos:
                continue                        # the engine never sees the buffer: graph copy_
            outside = [u for u in value.users if u.op != "output"]
            later = [u for u in ph.users if u is not call and order[u] > order[call]]
            if outside or later or value in returned:
                continue                        # the new value leaves the engine: graph copy_
            in_name = e.inputs[arg_pos[ph]]
            inner, cache = outs[k], ins[arg_pos[ph]]
            if w.is_kv and inner.target in (SLICE_SCATTER, INDEX_COPY) \
                    and inner.args[0] is cache and not _reads_old_value_after(sub, cache, inner):
                e.aliased.append((out_name, in_name))
                e.kv_nodes.append(inner.name)
            else:
                e.copy_back.append((out_name, in_name))
        _keep_one_output(e, call, returned)
        engines.append(e)
    return engines


def _keep_one_output(e: _Engine, call: Node, returned: set) -> None:
    """A delegate must hand something back, or ExecuTorch drops the call with its state writes:
    an engine whose outputs are all written in place lets its first write leave as an ordinary
    output instead (copied back once by the program's write-back)."""
    in_place = {o for o, _ in e.aliased + e.copy_back}
    for item in call.users:
        if item.target is operator.getitem and (e.outputs[item.args[1]] not in in_place
                                                or item in returned):
            if item.users:
                return
    if e.copy_back:
        e.copy_back.pop(0)
    elif e.aliased:
        e.aliased.pop(0)
        e.kv_nodes.pop(0)


def _engine_info(e: _Engine) -> EngineInfo:
    return EngineInfo(name=str(e.call.target).lstrip("_"), input_names=tuple(e.inputs),
                      output_names=tuple(e.outputs),
                      aliased_io=tuple(AliasedIO(o, i) for o, i in e.aliased),
                      input_buffers=tuple(e.buffers_in), output_buffers=tuple(e.buffers_out),
                      kind="reference")


def _build(gm: GraphModule, e: _Engine, info: EngineInfo) -> None:
    """Build the payload and replace the call_module by tte::execute_engine."""
    ins, outs = _submodule_io(e.sub)
    in_io, out_io = _binding_io(ins, True), _binding_io(outs, False)
    use_kv_update_layers(e.sub, e.kv_nodes)
    payload = to_executorch_program(e.sub)
    meta = blobfmt.BlobMetadata(
        io_bindings=tuple(in_io + out_io),
        aliased_io=info.aliased_io,
        engine_kind="reference",
        buffers=tuple(blobfmt.BufferBinding(i, f) for i, f in e.buffers_in),
        copy_back=tuple(blobfmt.CopyBack(o, i) for o, i in e.copy_back),
    )
    blobfmt.validate(meta)
    attr = f"{info.name}_payload"
    setattr(gm, attr, torch.frombuffer(bytearray(payload), dtype=torch.uint8))
    with gm.graph.inserting_before(e.call), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a plain tensor attribute: exported as a constant
        engine = gm.graph.get_attr(attr)
        new = gm.graph.call_function(EXECUTE_ENGINE, (list(e.call.args), engine,
                                                      Signature(info.name, meta).to_json()))
    new.meta["val"] = [o.meta["val"] for o in outs]
    e.call.replace_all_uses_with(new)
    gm.graph.erase_node(e.call)
    delattr(gm, e.call.target)


def _to_module_form(gm: GraphModule, lifted, engines: List[_Engine]) -> None:
    """Buffers back to get_attr; in-engine writes dropped; other writes as trailing copy_."""
    graph = gm.graph
    handled = set()
    for e in engines:
        fqn_of_out = dict(e.buffers_out)
        for out, _ in e.aliased + e.copy_back:
            handled.add(fqn_of_out[out])
    out_node = graph.output_node()
    outs = list(out_node.args[0])
    user_outs = outs[:lifted.num_user_outputs]
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    getattrs = {}
    for fqn, ph_name in lifted.buffer_inputs:
        ph = placeholders[ph_name]
        with graph.inserting_before(ph):
            ga = graph.get_attr(fqn)
        ga.meta.update(ph.meta)
        ph.replace_all_uses_with(ga)
        graph.erase_node(ph)
        getattrs[fqn] = ga
    with graph.inserting_before(out_node):
        for fqn, idx in lifted.buffer_outputs:
            if fqn not in handled:
                graph.call_function(torch.ops.aten.copy_.default, (getattrs[fqn], outs[idx]))
    out_node.args = (tuple(user_outs),)
    graph.eliminate_dead_code()
    graph.lint()
    gm.recompile()


def compile(program: Union[torch.export.ExportedProgram, torch.nn.Module],
            example_args: Optional[Sequence[object]] = None, *,
            torch_executed_ops: Iterable[object] = (),
            shared_state: Iterable[str] = (), strict: bool = False) -> CompiledModule:
    """Plan → lift → partition → build reference engines → reconcile.

    `program` is an ExportedProgram from any export mode, or a module exported here with
    `example_args` (`strict` choosing torch.export's mode). `shared_state` names buffers other
    methods of the same program write: read here, they stay live engine inputs instead of being
    baked into the engine as constants."""
    if isinstance(program, torch.nn.Module):
        if example_args is None:
            raise ValueError("compile(module) needs example_args to export it; or pass the "
                             "ExportedProgram")
        program = torch.export.export(copy.deepcopy(program).eval(), tuple(example_args),
                                      strict=strict)
    excluded = _normalize_ops(torch_executed_ops)
    plan = plan_mutations(program, torch_executed_ops=torch_executed_ops)
    lifted = lift_mutated_buffers(functional_program(program).module(), plan)
    gm = lifted.gm
    calls = partition(gm, excluded, keep_buffers=shared_state)
    phs = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    buffer_ph = {f: phs[p] for f, p in lifted.buffer_inputs}
    outs = list(gm.graph.output_node().args[0])
    value_of = {f: outs[i] for f, i in lifted.buffer_outputs}
    engines = _plan_engine_writes(gm, calls, plan, buffer_ph, value_of,
                                  outs[:lifted.num_user_outputs])
    infos = [_engine_info(e) for e in engines]
    final = reconcile(plan, infos)
    if final.rebuilds:  # reference engines output every new value, so this is a bug
        raise PlanError(f"reference compile needs engine rebuilds: {final.rebuilds}")
    for e, info in zip(engines, infos):
        _build(gm, e, info)
    _to_module_form(gm, lifted, engines)
    for fqn, tensor in lifted.initial_values:
        _set_buffer(gm, fqn, tensor.clone())
    _drop_unused_state(gm)
    return CompiledModule(gm, final, tuple(infos))


def _drop_unused_state(gm: GraphModule) -> None:
    """Weights now live in the engine payloads: drop parameters/buffers the graph no longer reads,
    so they are not serialised a second time."""
    used = {str(n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    for name, _ in list(gm.named_parameters()) + list(gm.named_buffers()):
        if name not in used:
            *path, leaf = name.split(".")
            mod = gm.get_submodule(".".join(path)) if path else gm
            mod._parameters.pop(leaf, None)
            mod._buffers.pop(leaf, None)


def _set_buffer(root: torch.nn.Module, fqn: str, tensor: torch.Tensor) -> None:
    *path, name = fqn.split(".")
    mod = root
    for p in path:
        if not hasattr(mod, p):
            mod.add_module(p, torch.nn.Module())
        mod = getattr(mod, p)
    if name in mod._buffers:
        mod._buffers[name] = tensor
    else:
        mod.register_buffer(name, tensor)
