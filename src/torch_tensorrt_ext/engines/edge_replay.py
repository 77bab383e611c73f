"""Lower a reference payload to ExecuTorch's edge dialect once per distinct operator call.

Invariant: for an ExportedProgram of static, functional ATen operator calls whose every value is a
tensor, `replayed_edge(ep, config)` returns the edge program `to_edge(ep, compile_config=config)`
returns — the same edge operators in the same order on the same values, parameters and inputs —
except that equal lifted constants (the tensors ExecuTorch makes of scalar arguments) are one
constant. It gets there by lowering each distinct call — operator, constant arguments, and the
dtype/shape/stride/device of each input — once, through ExecuTorch's own `to_edge`, in one small
catalog program, and copying that call's edge subgraph for every node that makes the call:
ExecuTorch's decompositions and aten→edge passes rewrite one call at a time from what it is and
what it reads, so a call lowers the same wherever it stands. A program with anything else
(symbolic values, mutating or higher-order operators, non-tensor values) gets None, and the
caller runs ExecuTorch's whole pipeline. The 32-layer demo decoder's partition makes 993 calls,
24 of them distinct: 24 calls, not 993, go through to_edge's dozen retracing passes.

A lowered call is kept for the process (`_LOWERED`, bounded, least recently used out), keyed by
its call key and the edge config, so a later payload making the same call — the next engine of a
model, the decode method after prefill — copies it without lowering again; a payload whose every
call was lowered before makes no `to_edge` at all. A call whose key holds an object compared by
identity (`("object", id)`) is not kept: an id can name another object later.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import operator
import threading

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.export import ExportedProgram
from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec,
                                          TensorArgument)
from torch.fx import Graph, GraphModule, Node

__all__ = ["distinct_calls", "replayable", "replayed_edge"]


def _tensor_key(v: torch.Tensor) -> tuple:
    return (v.dtype, tuple(v.shape), tuple(v.stride()), v.device)


def _encode(arg, inputs: list[Node]):
    """`arg` with each input node replaced by its position among the call's distinct inputs;
    types kept, so 1, 1.0 and True (and 0.0 and -0.0) are different calls."""
    if isinstance(arg, Node):
        if arg not in inputs:
            inputs.append(arg)
        return ("$", inputs.index(arg))
    if isinstance(arg, (list, tuple)):
        return (type(arg).__name__, tuple(_encode(a, inputs) for a in arg))
    if isinstance(arg, dict):
        return ("dict", tuple((k, _encode(v, inputs)) for k, v in sorted(arg.items())))
    if isinstance(arg, float):
        return ("float", repr(arg))
    if isinstance(arg, _CONSTANTS):
        return (type(arg).__name__, arg)
    return ("object", id(arg))   # anything else is shared only by calls holding the same object


# constant arguments compared by value (and type)
_CONSTANTS = (bool, int, complex, str, type(None), torch.dtype, torch.device, torch.layout,
              torch.memory_format)


def call_key(node: Node) -> tuple[tuple, list[Node]]:
    """(what makes two calls lower alike, the call's distinct input nodes in first-use order)."""
    inputs: list[Node] = []
    args = _encode((node.args, node.kwargs), inputs)
    return (node.target, args, tuple(_tensor_key(i.meta["val"]) for i in inputs)), inputs


def _tensors(val) -> tuple | None:
    vals = tuple(val) if isinstance(val, (list, tuple)) else (val,)
    ok = vals and all(isinstance(v, torch.Tensor) for v in vals)
    return vals if ok else None


def _replayable_call(node: Node) -> bool:
    if node.target is operator.getitem:
        return isinstance(node.meta.get("val"), torch.Tensor)
    if not isinstance(node.target, torch._ops.OpOverload) or node.target._schema.is_mutable:
        return False
    if "as_strided" in node.target.name():   # reads its input's storage offset, not in the key
        return False
    val = node.meta.get("val")
    if _tensors(val) is None or not all(isinstance(a.meta.get("val"), torch.Tensor)
                                        for a in node.all_input_nodes):
        return False
    # a multi-output call is read only through getitem
    return not isinstance(val, (list, tuple)) or all(
        u.target is operator.getitem for u in node.users)


def _tensor_node(a) -> bool:
    return isinstance(a, Node) and isinstance(a.meta.get("val"), torch.Tensor)


def replayable(ep: ExportedProgram) -> bool:
    """Whether `replayed_edge` lowers `ep` (else ExecuTorch's whole pipeline must): placeholders,
    calls and outputs only, every value a tensor, no call mutating or higher-order."""
    nodes = list(ep.graph_module.graph.nodes)
    if not any(n.op == "placeholder" for n in nodes):
        return False
    for n in nodes:
        if n.op == "call_function":
            ok = _replayable_call(n)
        elif n.op == "placeholder":
            ok = isinstance(n.meta.get("val"), FakeTensor)
        else:
            ok = n.op == "output" and all(_tensor_node(a) for a in n.args[0])
        if not ok:
            return False
    return True


def distinct_calls(ep: ExportedProgram) -> int:
    """How many calls `replayed_edge` lowers through ExecuTorch for `ep` (its nodes, less
    repeats)."""
    return len(_catalog(ep)[0])


@dataclasses.dataclass
class _Call:
    """One distinct call: a node that makes it, its key, and (once lowered, here or by an earlier
    payload) the catalog's edge placeholders for its inputs, its edge subgraph in order, the edge
    values of its outputs and the catalog constants the subgraph reads."""
    node: Node
    inputs: list[Node]
    key: tuple = ()
    edge_inputs: list[Node] = dataclasses.field(default_factory=list)
    edge_nodes: list[Node] = dataclasses.field(default_factory=list)
    edge_outputs: list[Node] = dataclasses.field(default_factory=list)
    consts: dict[Node, torch.Tensor] = dataclasses.field(default_factory=dict)  # catalog's, read

    @property
    def n_outputs(self) -> int:
        return len(_tensors(self.node.meta["val"]))

    @property
    def multi(self) -> bool:
        return isinstance(self.node.meta["val"], (list, tuple))


def _fake_like(v, fake_mode):
    """`v` (a fake tensor of any mode, or a sequence of them) as a fake tensor of `fake_mode`."""
    if isinstance(v, torch.Tensor):
        with fake_mode:
            return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype,
                                       device=v.device)
    if isinstance(v, (list, tuple)):
        return type(v)(_fake_like(x, fake_mode) for x in v)
    return v


def _catalog_module(calls: list[_Call], fake_mode) -> tuple[GraphModule, tuple]:
    """A program making each distinct call once, on inputs of its own; outputs all of them."""
    g = Graph()
    outs, examples = [], []
    for i, call in enumerate(calls):
        env = {}
        for j, node in enumerate(call.inputs):
            env[node] = g.placeholder(f"call{i}_in{j}")
            examples.append(_fake_like(node.meta["val"], fake_mode))
        made = g.call_function(call.node.target, torch.fx.map_arg(call.node.args, env.__getitem__),
                               torch.fx.map_arg(call.node.kwargs, env.__getitem__))
        outs += ([g.call_function(operator.getitem, (made, j)) for j in range(call.n_outputs)]
                 if call.multi else [made])
    g.output(tuple(outs))
    return GraphModule(torch.nn.Module(), g), tuple(examples)


def _subgraph(outputs: list[Node], graph: Graph) -> list[Node]:
    """The nodes computing `outputs` from placeholders, in graph order."""
    seen, stack = set(), [o for o in outputs if isinstance(o, Node)]
    while stack:
        n = stack.pop()
        if n not in seen and n.op != "placeholder":
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return [n for n in graph.nodes if n in seen]


def _lower_catalog(calls: list[_Call], config, fake_mode) -> bool:
    """Lower the catalog through ExecuTorch's `to_edge`; fill each call's edge subgraph and the
    lifted constants it reads; False if the calls did not lower apart."""
    from executorch.exir import to_edge

    module, examples = _catalog_module(calls, fake_mode)
    edge = to_edge(torch.export.export(module, examples, strict=False),
                   compile_config=config).exported_program()
    sig = edge.graph_signature
    user = set(sig.user_inputs)
    placeholders = [n for n in edge.graph_module.graph.nodes if n.op == "placeholder"]
    inputs = iter(n for n in placeholders if n.name in user)
    outputs = iter(edge.graph_module.graph.output_node().args[0])
    targets = {s.arg.name: s.target for s in sig.input_specs}
    consts = {n: (edge.constants[targets[n.name]] if targets[n.name] in edge.constants
                  else edge.state_dict[targets[n.name]])
              for n in placeholders if n.name not in user}
    for call in calls:
        call.edge_inputs = [next(inputs) for _ in call.inputs]
        call.edge_outputs = [next(outputs) for _ in range(call.n_outputs)]
        call.edge_nodes = _subgraph(call.edge_outputs, edge.graph_module.graph)
        reads = [a for n in call.edge_nodes for a in n.all_input_nodes if a.op == "placeholder"]
        if not set(reads) <= set(call.edge_inputs) | set(consts):
            return False  # a call's edge subgraph reads another call's inputs: not separable
        call.consts = {a: consts[a] for a in reads if a in consts}
    return True


# lowered calls kept across payloads: (config key, call key) -> _Call, least recently used first
_LOWERED: collections.OrderedDict[tuple, _Call] = collections.OrderedDict()
_LOWERED_MAX = 4096
_LOWERED_LOCK = threading.Lock()


def _by_identity(key) -> bool:
    """Whether a call key holds an object compared by identity (`_encode`'s "object")."""
    if isinstance(key, tuple):
        return (len(key) == 2 and key[0] == "object") or any(_by_identity(k) for k in key)
    return False


def _config_key(config) -> str:
    return repr(config)


def _take_lowered(calls: list[_Call], config) -> list[_Call]:
    """Fill each call lowered before from `_LOWERED`; the calls still to lower."""
    ck, missing = _config_key(config), []
    with _LOWERED_LOCK:
        for call in calls:
            kept = _LOWERED.get((ck, call.key))
            if kept is None:
                missing.append(call)
                continue
            _LOWERED.move_to_end((ck, call.key))
            call.edge_inputs, call.edge_nodes = kept.edge_inputs, kept.edge_nodes
            call.edge_outputs, call.consts = kept.edge_outputs, kept.consts
    return missing


def _keep_lowered(calls: list[_Call], config) -> None:
    ck = _config_key(config)
    with _LOWERED_LOCK:
        for call in calls:
            if not _by_identity(call.key):
                _LOWERED[(ck, call.key)] = dataclasses.replace(call, node=None, inputs=[])
        while len(_LOWERED) > _LOWERED_MAX:
            _LOWERED.popitem(last=False)


def _catalog(ep: ExportedProgram) -> tuple[list[_Call], dict[Node, tuple[_Call, list[Node]]]]:
    """The distinct calls of `ep`, and for each call node: its call and its own inputs."""
    calls: dict[tuple, _Call] = {}
    made = {}
    for n in ep.graph_module.graph.nodes:
        if n.op == "call_function" and n.target is not operator.getitem:
            key, inputs = call_key(n)
            made[n] = (calls.setdefault(key, _Call(n, inputs, key)), inputs)
    return list(calls.values()), made


def _constant_name(taken: set) -> str:
    i = 0
    while f"_lifted_tensor_constant{i}" in taken:
        i += 1
    taken.add(f"_lifted_tensor_constant{i}")
    return f"_lifted_tensor_constant{i}"


def _lift_constants(g: Graph, consts: dict[Node, torch.Tensor], fake_mode, taken: set, env,
                    specs: list, state: dict) -> None:
    """One lifted buffer placeholder per catalog constant, as ExecuTorch's constant lifting
    makes them."""
    for edge_node, tensor in consts.items():
        fqn = _constant_name(taken)
        env[edge_node] = p = g.placeholder(fqn)
        p.meta["val"] = fake_mode.from_tensor(tensor, static_shapes=True)
        p.meta["val"].constant = tensor
        specs.append(InputSpec(InputKind.BUFFER, TensorArgument(p.name), fqn, persistent=True))
        state[fqn] = tensor


def _placeholders(ep: ExportedProgram, g: Graph, consts: dict[Node, torch.Tensor], fake_mode):
    """`ep`'s placeholders, with the catalog's constants lifted before its first user input (or
    last, as ExecuTorch's constant lifting places them). Returns (node map, input specs, state
    dict entries of the constants)."""
    sig = ep.graph_signature
    user, spec_of = set(sig.user_inputs), {s.arg.name: s for s in sig.input_specs}
    env, specs, state = {}, [], {}
    taken = set(ep.state_dict) | set(ep.constants) | {n.name for n in ep.graph_module.graph.nodes}
    lifted = False
    for n in ep.graph_module.graph.nodes:
        if n.op != "placeholder":
            continue
        if n.name in user and not lifted:
            _lift_constants(g, consts, fake_mode, taken, env, specs, state)
            lifted = True
        env[n] = p = g.placeholder(n.name)
        p.meta = copy.copy(n.meta)
        specs.append(dataclasses.replace(spec_of[n.name], arg=TensorArgument(p.name)))
    if not lifted:
        _lift_constants(g, consts, fake_mode, taken, env, specs, state)
    return env, specs, state


_ORIGIN_META = ("stack_trace", "nn_module_stack", "source_fn_stack")


def _replay(ep: ExportedProgram, made, env: dict[Node, object], g: Graph, fake_mode) -> None:
    """Every call node of `ep` as its call's edge subgraph on the node's own inputs."""
    for index, n in enumerate(ep.graph_module.graph.nodes, start=1):
        if n.op != "call_function":
            continue
        if n.target is operator.getitem:
            env[n] = env[n.args[0]][n.args[1]]
            continue
        call, inputs = made[n]
        local = dict(zip(call.edge_inputs, (env[i] for i in inputs), strict=False))
        arg = lambda a: local[a] if a in local else env[a]  # noqa: E731, B023  (used now)
        for edge_node in call.edge_nodes:
            new = g.node_copy(edge_node, arg)
            new.meta = {k: v for k, v in edge_node.meta.items()
                        if k not in ("from_node", "tensor_meta") + _ORIGIN_META}
            new.meta.update({k: n.meta[k] for k in _ORIGIN_META if k in n.meta})
            new.meta["val"] = _fake_like(edge_node.meta["val"], fake_mode)
            new.meta["debug_handle"] = index   # one handle per partition node, as ExecuTorch's
            local[edge_node] = new
        outs = [arg(o) for o in call.edge_outputs]
        env[n] = outs if call.multi else outs[0]


def _call_graph(ep: ExportedProgram, outputs) -> list:
    """`ep`'s module call graph naming the replayed graph's outputs (the inputs keep names)."""
    renamed = {getattr(o, "name", None): n.name
               for o, n in zip(ep.graph_module.graph.output_node().args[0], outputs, strict=False)}
    graph = copy.deepcopy(ep.module_call_graph)
    for entry in graph:
        for arg in entry.signature.outputs if entry.signature is not None else ():
            if getattr(arg, "name", None) in renamed:
                arg.name = renamed[arg.name]
    return graph


def _edge_program(ep: ExportedProgram, gm: GraphModule, input_specs, state, config):
    from executorch.exir.verification.verifier import EXIREdgeDialectVerifier

    outputs = gm.graph.output_node().args[0]
    output_specs = [dataclasses.replace(s, arg=TensorArgument(v.name))
                    for s, v in zip(ep.graph_signature.output_specs, outputs, strict=False)]
    return ExportedProgram(
        root=gm, graph=gm.graph,
        graph_signature=ExportGraphSignature(input_specs=input_specs, output_specs=output_specs),
        state_dict={**ep.state_dict, **state}, range_constraints=ep.range_constraints,
        module_call_graph=_call_graph(ep, outputs), example_inputs=ep.example_inputs,
        constants=ep.constants,
        verifiers=[EXIREdgeDialectVerifier(edge_compile_config=config, class_only=True)])


def replayed_edge(ep: ExportedProgram, config):
    """`to_edge(ep, compile_config=config)`'s EdgeProgramManager, made by lowering each distinct
    call once (module docstring), or None where `ep` is not `replayable` (or its calls do not
    lower apart)."""
    from executorch.exir import EdgeProgramManager
    from executorch.exir.passes.remove_unused_parameters_pass import (
        remove_unused_parameters_pass)

    if not replayable(ep):
        return None
    fake_mode = next(n.meta["val"].fake_mode for n in ep.graph_module.graph.nodes
                     if n.op == "placeholder")
    calls, made = _catalog(ep)
    missing = _take_lowered(calls, config)
    if missing:
        if not _lower_catalog(missing, config, fake_mode):
            return None
        _keep_lowered(missing, config)
    consts = {n: t for call in calls for n, t in call.consts.items()}
    g = Graph()
    env, input_specs, state = _placeholders(ep, g, consts, fake_mode)
    _replay(ep, made, env, g, fake_mode)
    g.output(tuple(env[a] for a in ep.graph_module.graph.output_node().args[0]))
    g.eliminate_dead_code()
    gm = GraphModule(torch.nn.Module(), g)
    edge = remove_unused_parameters_pass(_edge_program(ep, gm, input_specs, state, config))
    return EdgeProgramManager({"forward": edge}, compile_config=config)
