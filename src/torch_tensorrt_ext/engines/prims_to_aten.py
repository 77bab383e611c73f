"""A graph's `prims` calls — and the one ATen op torch-tensorrt's decompositions add that
ExecuTorch has no kernel for — rewritten as the ATen calls ExecuTorch lowers.

Torch-TensorRT's decompositions leave some `torch.ops.prims` calls in a compiled graph
(train-mode BatchNorm decomposes through `torch._refs` into `prims.broadcast_in_dim` and
`prims.div`) — in an engine's partition, or in the part of the program left to PyTorch (a
partition below `min_block_size`, or split off by `torch_executed_ops`). The TensorRT converters
take them, but ExecuTorch's `to_edge` refuses a non-ATen operator whose output aliases its input
(`prims::broadcast_in_dim(Tensor(a) a, ...) -> Tensor(a)`) and has no kernel for the others
(`Missing out variants: {'prims::div'}`). Torch-TensorRT also decomposes every `aten.view` into
`aten._reshape_copy`, which ExecuTorch has no out variant for (`Missing out variants:
{'aten::_reshape_copy'}`: a KV write whose partition is left to PyTorch); it is the
`reshape` it computes (the program is functional: that it copies is not observable). The one
rewrite serves both: the reference engine's payload (`engines.payload`) and the saved program's
host part (`executorch.saving.prepare`).

Invariant: `prims_to_aten(gm)` replaces, in place, each call of an op in `_REWRITES` by ATen
calls computing the same values (same dtype, shape and elements, `meta["val"]` kept), and
touches nothing else; an op not in the table is left for ExecuTorch to accept or refuse. It
returns each replaced node's name -> its replacement's name (a caller whose program signature
names a replaced node renames it).
"""
from __future__ import annotations

import functools

import torch
from torch.fx import GraphModule, Node

from .fake_calls import add_call

__all__ = ["has_prims", "prims_to_aten"]

aten, prims = torch.ops.aten, torch.ops.prims


def _is_float(node) -> bool:
    val = node.meta.get("val") if isinstance(node, Node) else node
    return val.dtype.is_floating_point or val.dtype.is_complex if isinstance(
        val, torch.Tensor) else isinstance(val, (float, complex))


def _broadcast_in_dim(call, a, shape, dims):
    """`a`'s dims placed at `dims` of `shape`: the others unsqueezed, then expanded."""
    for d in range(len(shape)):
        if d not in dims:
            a = call(aten.unsqueeze.default, a, d)
    return call(aten.expand.default, a, list(shape))


def _div(call, a, b):
    """prims.div: true division of floats, division rounded toward zero of integers."""
    if _is_float(a) or _is_float(b):
        return call(aten.div.Tensor, a, b)
    return call(aten.div.Tensor_mode, a, b, rounding_mode="trunc")


_REWRITES = {
    prims.broadcast_in_dim.default: _broadcast_in_dim,
    prims.div.default: _div,
    prims.squeeze.default: lambda call, a, dims: call(aten.squeeze.dims, a, list(dims)),
    prims.convert_element_type.default:
        lambda call, a, dtype: call(aten._to_copy.default, a, dtype=dtype),
    prims.sum.default: lambda call, a, dims, output_dtype=None:
        call(aten.sum.dim_IntList, a, list(dims), dtype=output_dtype),
    prims.var.default: lambda call, a, dims, correction, output_dtype=None:
        call(aten.var.correction, a, list(dims), correction=correction),
    aten._reshape_copy.default: lambda call, a, size: call(aten.reshape.default, a, list(size)),
}


def has_prims(gm: GraphModule) -> bool:
    """`gm` calls an op `prims_to_aten` rewrites."""
    return any(n.op == "call_function" and n.target in _REWRITES for n in gm.graph.nodes)


def prims_to_aten(gm: GraphModule) -> dict[str, str]:
    """Rewrite `gm`'s calls of the ops in `_REWRITES` as ATen calls (module docstring); returns
    each replaced node's name -> its replacement's."""
    renamed = {}
    for node in list(gm.graph.nodes):
        rewrite = _REWRITES.get(node.target) if node.op == "call_function" else None
        if rewrite is None:
            continue
        with gm.graph.inserting_before(node):
            new = rewrite(functools.partial(add_call, gm.graph), *node.args, **node.kwargs)
        new.meta = {**node.meta, "val": new.meta["val"]}
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        renamed[node.name] = new.name
    if renamed:
        gm.recompile()
    return renamed
