"""`torch_tensorrt.Input` min/opt/max specs on the ahead-of-time paths.

torch-tensorrt 2.14.0 turns each dynamic axis of an `Input` into a `Dim` of its own unless the
caller names it with `shared_dims=`; a compiled program whose inputs share a length (a prompt's
tokens and its positions) then fails torch.export's check ("L['pos'].size()[0] and
L['x'].size()[2] must always be equal"), and `torch_tensorrt.dynamo.export` refuses `Input`
objects outright.

Invariant: `unify_shared_dims(module, dynamic_shapes)` returns `dynamic_shapes` with every set of
dynamic axes that the compiled module's own placeholders size by one symbol given one `Dim`
(bounds: the intersection of theirs, named after the first); axes the module sizes differently,
or a module without symbolic metadata, are left as given. `export_args(inputs, dynamic_shapes)`
turns `Input` specs into the example tensors and `dynamic_shapes` torch.export takes (the
specs' own inference, unified as above when a module is given); tensors pass through.
"""
from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import torch


def _user_placeholders(module: torch.nn.Module) -> list:
    graph = getattr(module, "graph", None)
    if graph is None:
        return []
    return [n for n in graph.nodes if n.op == "placeholder"]


def _symbol(size: Any) -> str | None:
    return str(size.node.expr) if isinstance(size, torch.SymInt) else None


def unify_shared_dims(module: torch.nn.Module, dynamic_shapes: Any) -> Any:
    if not isinstance(dynamic_shapes, dict):
        return dynamic_shapes
    placeholders = _user_placeholders(module)
    names = list(dynamic_shapes)
    groups: dict[str, list] = {}
    for i, name in enumerate(names):
        spec = dynamic_shapes[name]
        if i >= len(placeholders) or not isinstance(spec, dict):
            continue
        val = placeholders[i].meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for dim in spec:
            if isinstance(dim, int) and dim < val.dim():
                if (sym := _symbol(val.shape[dim])) is not None:
                    groups.setdefault(sym, []).append((name, dim))
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in dynamic_shapes.items()}
    for axes in groups.values():
        if len(axes) < 2:
            continue
        dims = [out[n][d] for n, d in axes]
        lo = max(getattr(x, "min", 0) for x in dims)
        hi = min(getattr(x, "max", 2 ** 62) for x in dims)
        shared = torch.export.Dim(str(getattr(dims[0], "__name__", "T")), min=lo, max=hi)
        for n, d in axes:
            out[n][d] = shared
    return out


def export_args(inputs: Sequence[Any], dynamic_shapes: Any = None,
                module: torch.nn.Module | None = None) -> tuple[tuple, Any]:
    """(example tensors, dynamic_shapes) for torch.export from `inputs` — tensors or `Input`
    specs; explicit `dynamic_shapes` win, as in `torch_tensorrt.save`."""
    from torch_tensorrt import Input
    from torch_tensorrt.dynamo._tracer import get_dynamic_shapes
    if not any(isinstance(x, Input) for x in inputs):
        return tuple(inputs), dynamic_shapes
    from torch_tensorrt.dynamo._tracer import build_dim_registry
    from torch_tensorrt.dynamo.utils import get_torch_inputs
    tensors = tuple(get_torch_inputs(list(inputs), "cpu"))
    if dynamic_shapes is None:
        registry = build_dim_registry(list(inputs), {})
        shapes = [get_dynamic_shapes(x, registry) for x in inputs]
        dynamic_shapes = tuple(shapes)
        if module is not None:
            keyed = dict(enumerate(shapes))
            unified = unify_shared_dims(module, keyed)
            dynamic_shapes = tuple(unified[i] for i in range(len(shapes)))
    return tensors, dynamic_shapes


__all__ = ["export_args", "unify_shared_dims"]
