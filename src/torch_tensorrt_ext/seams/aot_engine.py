"""An engine that was never set up (built without a CUDA device), as torch-tensorrt graphs see it.

Invariant: an engine built ahead of time is represented in every exported graph by
`tensorrt::no_op_placeholder_for_execute_engine` — the engine's serialized info as strings and
its bytes as a uint8 constant — which torch-tensorrt's ExecuTorch path and its cross-compiled
loader already read; it is never deserialized on a machine without a device. Calling such an
engine outside an export raises `NoDeviceError` naming it; with a device it is set up and run
as usual.
"""
from __future__ import annotations

import operator
from typing import Any
from collections.abc import Sequence

import torch
from torch.fx import Graph, GraphModule, Node

from ..engines.engine_module import own_call
from ..engines.payload import byte_tensor
from .device import has_cuda, require_device

ENGINE_ATTR = "_tte_aot_engine_bytes"


def _engine_tensor(module: torch.nn.Module) -> torch.Tensor:
    """The engine's bytes as a uint8 tensor over the module's own `serialized_engine` (not a
    copy: an engine is as large as its weights). Nothing writes an engine's bytes."""
    t = getattr(module, ENGINE_ATTR, None)
    if t is None:
        t = byte_tensor(module.serialized_engine)
        object.__setattr__(module, ENGINE_ATTR, t)  # a plain attribute: exported as a constant
    return t


def _string_slots(module: torch.nn.Module) -> list[str]:
    from torch_tensorrt.dynamo.runtime._serialized_engine_layout import ENGINE_IDX
    info = module._pack_engine_info()
    return ["" if i == ENGINE_IDX else (v.decode() if isinstance(v, bytes) else str(v))
            for i, v in enumerate(info)]


def _placeholder_args(inputs: Sequence[Any], strings: list[str], engine: Any) -> tuple:
    from torch_tensorrt.dynamo.runtime._serialized_engine_layout import ENGINE_IDX
    return (list(inputs), *strings[:ENGINE_IDX], engine, *strings[ENGINE_IDX + 1:])


_SCALARS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)


def _scalar_dtypes(module: torch.nn.Module, inputs: Sequence[Any]) -> dict:
    """{input index: dtype} of the engine's scalar inputs — symbolic ones: a start position an
    engine reads, a length it shapes by — each an input whose value is a Python or symbolic
    scalar, or (a graph node of unknown value) one the engine's record (`inout_symexprs`) marks
    `is_scalar`; the dtype is the record's, else the value's. A tensor is never one. TensorRT
    takes each as a 0-d tensor (a shape tensor when it shapes anything; the delegate binds those
    through host memory, CONTRACTS §1)."""
    recorded = (getattr(module, "symbolic_shape_expressions", None) or {}).get("inputs") or []
    out = {}
    for i, x in enumerate(inputs):
        entry = recorded[i] if i < len(recorded) and isinstance(recorded[i], dict) else {}
        if isinstance(x, _SCALARS) or (x is None and entry.get("is_scalar")):
            dtype = entry.get("dtype")
            if not isinstance(dtype, torch.dtype):
                dtype = torch.bool if isinstance(x, (bool, torch.SymBool)) else \
                    torch.float32 if isinstance(x, (float, torch.SymFloat)) else torch.int64
            out[i] = dtype
    return out


_SCALAR_OPS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default,
               torch.ops.aten.sym_size.int, torch.ops.aten.sym_numel.default}


def _node_value(gm: GraphModule, a: Any) -> Any:
    """What an argument of an engine being inlined holds when the program runs: a Python value as
    is; for a node, its recorded value — and for an output of a piece PyTorch runs (`getitem` of a
    `_run_on_gpu*` call, inlined after the engines), that piece's own output node's: an `item()`
    there is a scalar, a 0-d tensor stays a tensor. An engine output is a tensor (its placeholder
    returns one even where the engine records a scalar); unknown: None (the record decides)."""
    if not isinstance(a, Node):
        return a
    if a.target is operator.getitem and isinstance(a.args[0], Node):
        source, index = a.args[0], a.args[1]
        if "_run_on_acc" in str(source.target) or \
                source.target is torch.ops.tensorrt.no_op_placeholder_for_execute_engine.default:
            return torch.empty(())   # an engine's output (inlined already, or not yet)
        if source.op == "call_module":
            outputs = gm.get_submodule(str(source.target)).graph.output_node().args[0]
            a = outputs[index] if isinstance(outputs, (tuple, list)) else outputs
            if not isinstance(a, Node):
                return a
    if a.op == "call_function" and a.target in _SCALAR_OPS:
        return a.meta.get("val", 0)
    val = a.meta.get("val")
    return val if isinstance(val, (torch.Tensor, *_SCALARS)) else None


def call_unset_engine(module: torch.nn.Module, inputs: Sequence[Any]):
    """`TorchTensorRTModule.forward` for an engine that is not set up."""
    if has_cuda():
        module.setup_engine()
        return module.forward(*inputs)
    if not torch.compiler.is_exporting():
        require_device(module.name)
    from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import user_output_count
    inputs = list(inputs)
    for i, dtype in _scalar_dtypes(module, inputs).items():
        if not isinstance(inputs[i], torch.Tensor):
            inputs[i] = torch.scalar_tensor(inputs[i], dtype=dtype)
    op = torch.ops.tensorrt.no_op_placeholder_for_execute_engine.default
    outputs = op(*_placeholder_args(inputs, _string_slots(module), _engine_tensor(module)))
    if module.aliased_io:
        outputs = outputs[:user_output_count(module.output_binding_names, module.aliased_io)]
    if len(outputs) == 1:
        return outputs[0]
    return tuple(outputs)


def is_unset(module: torch.nn.Module) -> bool:
    """An engine module the legacy exporter cannot inline as `execute_engine` on an engine
    object: a CPU reference engine, or a TensorRT engine kept serialized (no device)."""
    if own_call(module) is not None:
        return True
    return getattr(module, "engine", None) is None and not has_cuda()


def inline_unset_engine(gm: GraphModule, name: str, module: torch.nn.Module,
                        args: Sequence[Any]) -> Node:
    """The legacy exporter's inlining of engine `name`: a placeholder call (a reference engine:
    its `tte::execute_engine` call) whose engine bytes (and a reference engine's weights, each)
    are a buffer of `gm` (read through get_attr), as torch-tensorrt's ExecuTorch path does — the
    engine's own tensors, not copies (nothing writes an engine's bytes; a copy held every weight
    twice through the save)."""
    graph: Graph = gm.graph
    attr = f"{name}_engine_bytes"
    own = own_call(module)
    if own is not None:
        engine = _buffer(gm, attr, own.program)
        weights = [_buffer(gm, f"{name}_weight{i}", w) for i, w in enumerate(own.weights)]
        args = _scalars_as_tensors(graph, args, own.scalars)
        return graph.call_function(own.op, (args, engine, weights, own.signature))
    engine = _buffer(gm, attr, _engine_tensor(module))
    # the engine's symbolic scalar inputs, bound as 0-d tensors (a tensor never converted)
    args = _scalars_as_tensors(graph, args, _scalar_dtypes(module,
                                                            [_node_value(gm, a) for a in args]))
    op = torch.ops.tensorrt.no_op_placeholder_for_execute_engine.default
    return graph.call_function(op, _placeholder_args(args, _string_slots(module), engine))


def _buffer(gm: GraphModule, attr: str, tensor: torch.Tensor) -> Node:
    """A get_attr of `tensor`, registered as `gm`'s buffer `attr` (the tensor itself)."""
    gm.register_buffer(attr, tensor, persistent=True)
    node = gm.graph.get_attr(attr)
    node.meta["val"] = _fake_like(gm.graph, tensor)
    return node


def _scalars_as_tensors(graph: Graph, args: Sequence[Any], scalars) -> list:
    """`args` with each scalar input `i` of `scalars` ({i: dtype}) bound as a 0-d tensor."""
    args = list(args)
    for i, dtype in scalars.items():
        scalar = graph.call_function(torch.ops.aten.scalar_tensor.default, (args[i],),
                                     {"dtype": dtype})
        scalar.meta["val"] = _fake_like(graph, torch.empty((), dtype=dtype))
        args[i] = scalar
    return args


def _fake_like(graph: Graph, tensor: torch.Tensor):
    from torch._guards import detect_fake_mode
    mode = detect_fake_mode([n.meta["val"] for n in graph.nodes if "val" in n.meta])
    return mode.from_tensor(tensor) if mode else tensor
