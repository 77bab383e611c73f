"""An engine that was never set up (built without a CUDA device), as torch-tensorrt graphs see it.

Invariant: an engine built ahead of time is represented in every exported graph by
`tensorrt::no_op_placeholder_for_execute_engine` — the engine's serialized info as strings and
its bytes as a uint8 constant — which torch-tensorrt's ExecuTorch path and its cross-compiled
loader already read; it is never deserialized on a machine without a device. Calling such an
engine outside an export raises `NoDeviceError` naming it; with a device it is set up and run
as usual.
"""
from __future__ import annotations

import warnings
from typing import Any
from collections.abc import Sequence

import torch
from torch.fx import Graph, GraphModule, Node

from .device import has_cuda, require_device
from ..errors import Unsupported

ENGINE_ATTR = "_tte_aot_engine_bytes"


def _engine_tensor(module: torch.nn.Module) -> torch.Tensor:
    """The engine's bytes as a uint8 tensor over the module's own `serialized_engine` (not a
    copy: an engine is as large as its weights). Nothing writes an engine's bytes."""
    t = getattr(module, ENGINE_ATTR, None)
    if t is None:
        with warnings.catch_warnings():   # "non-writable buffer": it is only ever read
            warnings.simplefilter("ignore", UserWarning)
            t = torch.frombuffer(module.serialized_engine, dtype=torch.uint8)
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


def _refuse_scalar_inputs(engine: str, scalars: Sequence[str]) -> None:
    if scalars:
        raise Unsupported(
            f"TensorRT engine {engine!r} takes symbolic scalars ({', '.join(scalars)}) as shape "
            "tensor inputs (a value read from a tensor, such as the start position ExecuTorch's "
            "llama reads with item() when exported with enable_dynamic_shape=True, or its ring "
            "KV cache's positions); the ExecuTorch delegate does not bind TensorRT shape tensors "
            "yet. Export that model with static shapes (enable_dynamic_shape=False), or compile "
            "it with reference engines")


def call_unset_engine(module: torch.nn.Module, inputs: Sequence[Any]):
    """`TorchTensorRTModule.forward` for an engine that is not set up."""
    if has_cuda():
        module.setup_engine()
        return module.forward(*inputs)
    if not torch.compiler.is_exporting():
        require_device(module.name)
    from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import user_output_count
    names = list(getattr(module, "input_binding_names", None) or [])
    _refuse_scalar_inputs(module.name, [names[i] if i < len(names) else f"input {i}"
                                        for i, x in enumerate(inputs)
                                        if not isinstance(x, torch.Tensor)])
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
    from .engines import ReferenceEngineModule
    if isinstance(module, ReferenceEngineModule):
        return True
    return getattr(module, "engine", None) is None and not has_cuda()


def inline_unset_engine(gm: GraphModule, name: str, module: torch.nn.Module,
                        args: Sequence[Any]) -> Node:
    """The legacy exporter's inlining of engine `name`: a placeholder call (a reference engine:
    its `tte::execute_engine` call) whose engine bytes are a buffer of `gm` (read through
    get_attr), as torch-tensorrt's ExecuTorch path does."""
    from .engines import ReferenceEngineModule
    graph: Graph = gm.graph
    attr = f"{name}_engine_bytes"
    if isinstance(module, ReferenceEngineModule):
        from ..engines.execute_op import OP
        gm.register_buffer(attr, module.payload.clone(), persistent=True)
        engine = graph.get_attr(attr)
        engine.meta["val"] = _fake_like(graph, getattr(gm, attr))
        args = _scalars_as_tensors(graph, args, dict(module.scalars))
        return graph.call_function(OP, (args, engine, module.signature))
    gm.register_buffer(attr, _engine_tensor(module).clone(), persistent=True)
    engine = graph.get_attr(attr)
    engine.meta["val"] = _fake_like(graph, getattr(gm, attr))
    # the engine's own record of its inputs (torch-tensorrt's `inout_symexprs`)
    recorded = (getattr(module, "symbolic_shape_expressions", None) or {}).get("inputs") or []
    _refuse_scalar_inputs(name, [e.get("name", f"input {i}") for i, e in enumerate(recorded)
                                 if isinstance(e, dict) and e.get("is_scalar")])
    op = torch.ops.tensorrt.no_op_placeholder_for_execute_engine.default
    return graph.call_function(op, _placeholder_args(args, _string_slots(module), engine))


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
