"""Split a lifted graph into engine partitions: supported ATen ops inside, the rest in PyTorch.

Invariant: after `partition`, every call_function node of the parent graph is either an engine
call (`call_module` of a partition submodule whose outputs are always a tuple, read through
`operator.getitem`) or an op left to PyTorch (in `torch_executed_ops`, or not an ATen op);
no engine reads or produces a symbolic scalar (SymInt/SymBool from `.item()` or a size): those
nodes, and the ops their scalars are computed from, run in PyTorch and their tensor results
enter engines as ordinary inputs; constants an
engine reads (weights, index tensors) live inside its submodule, so they are baked
into the engine rather than passed per call, as TensorRT does — except buffers named as shared
state, which stay engine inputs so every call reads their live value.
"""
from __future__ import annotations

import operator
from typing import Iterable, List

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from ..lowering.kv_rules import op_name


class _Support(OperatorSupportBase):
    def __init__(self, excluded: frozenset, host: frozenset = frozenset()):
        self.excluded = excluded
        self.host = host

    def is_node_supported(self, submodules, node: Node) -> bool:
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:
            src = node.args[0]
            return isinstance(src, Node) and self.is_node_supported(submodules, src)
        if not isinstance(node.target, torch._ops.OpOverload):
            return False
        if node.target in self.excluded or op_name(node) in self.excluded or node in self.host:
            return False
        return _tensors_only(node)


def _feeds_scalars(gm: GraphModule) -> frozenset:
    """Every op a symbolic scalar (`.item()`, a size) is computed from: they run in PyTorch with
    it, so the scalar is derived from graph inputs alone (an `.item()` of an engine output loses
    its value range when torch.export re-traces the program)."""
    host, stack = set(), [n for n in gm.graph.nodes if _is_scalar_val(n.meta.get("val"))
                          and n.op == "call_function"]
    while stack:
        n = stack.pop()
        if n in host or n.op != "call_function":
            continue
        host.add(n)
        stack.extend(n.all_input_nodes)
    return frozenset(host)


def _is_scalar_val(val: object) -> bool:
    return isinstance(val, (torch.SymInt, torch.SymBool, torch.SymFloat, int, float, bool))


def _tensors_only(node: Node) -> bool:
    """An engine binds tensors only: a node producing a symbolic or Python scalar (`.item()`,
    `sym_size`, a runtime assert's None) or reading one produced by another node stays in
    PyTorch, so no SymInt/SymBool crosses an engine boundary (as in a TensorRT partition, whose
    bindings are tensors)."""
    val = node.meta.get("val")
    if "val" in node.meta and not (isinstance(val, torch.Tensor) or (
            isinstance(val, (list, tuple)) and val
            and all(isinstance(v, torch.Tensor) for v in val))):
        return False
    reads = torch.fx.node.map_arg((node.args, node.kwargs), lambda a: a)
    scalar_in = []
    torch.fx.node.map_arg(reads, lambda a: scalar_in.append(a)
                          if _is_scalar_val(a.meta.get("val")) else None)
    return not scalar_in


def _drop_guards(gm: GraphModule) -> None:
    for n in list(gm.graph.nodes):
        if n.op == "call_module" and str(n.target).startswith("_guards"):
            gm.graph.erase_node(n)


def _tuple_outputs(parent: GraphModule, call: Node) -> None:
    """Make the submodule return a tuple and the parent read it through getitem."""
    sub = getattr(parent, call.target)
    out = sub.graph.output_node()
    if isinstance(out.args[0], (tuple, list)):
        return
    out.args = ((out.args[0],),)
    sub.recompile()
    users = list(call.users)
    with parent.graph.inserting_after(call):
        item = parent.graph.call_function(operator.getitem, (call, 0))
    item.meta.update(call.meta)
    for u in users:
        u.replace_input_with(call, item)


def _inline_constants(parent: GraphModule, call: Node, keep: frozenset) -> None:
    """Move get_attr inputs (weights, constants) into the submodule, except the buffers in
    `keep` (state another method writes: the engine must read the live buffer)."""
    sub = getattr(parent, call.target)
    phs = [n for n in sub.graph.nodes if n.op == "placeholder"]
    keep_args = []
    for arg, ph in zip(call.args, phs):
        if isinstance(arg, Node) and arg.op == "get_attr" and str(arg.target) not in keep:
            value = _get_attr(parent, arg.target)
            attr = "c_" + str(arg.target).replace(".", "_")
            if isinstance(value, torch.nn.Parameter):
                sub.register_parameter(attr, torch.nn.Parameter(value.detach().clone(),
                                                                requires_grad=False))
            else:
                sub.register_buffer(attr, value.detach().clone())
            with sub.graph.inserting_before(ph):
                ga = sub.graph.get_attr(attr)
            ga.meta.update(ph.meta)
            ph.replace_all_uses_with(ga)
            sub.graph.erase_node(ph)
        else:
            keep_args.append(arg)
    call.args = tuple(keep_args)
    sub.graph.lint()
    sub.recompile()
    for n in list(parent.graph.nodes):
        if n.op == "get_attr" and not n.users:
            parent.graph.erase_node(n)


def _get_attr(gm: torch.nn.Module, target: str):
    obj = gm
    for part in str(target).split("."):
        obj = getattr(obj, part)
    return obj


def partition(gm: GraphModule, excluded: Iterable[object] = (),
              keep_buffers: Iterable[str] = ()) -> List[Node]:
    """Fuse supported ops of `gm` (in place) into `_engine_<i>` submodules; return the calls."""
    _drop_guards(gm)
    support = _Support(frozenset(excluded), _feeds_scalars(gm))
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(partitions, prefix="_engine_")
    calls = [n for n in fused.graph.nodes if n.op == "call_module"
             and str(n.target).startswith("_engine_")]
    for call in calls:
        _tuple_outputs(fused, call)
        _inline_constants(fused, call, frozenset(keep_buffers))
    fused.graph.lint()
    fused.recompile()
    return calls
