"""Build a reference engine's payload: one partition as an ExecuTorch program of its own.

Invariant: the payload's method `forward` takes the partition's inputs in binding order and
returns its outputs in binding order, every binding a tensor (a symbolic scalar input is bound as
a 0-d tensor, `scalar_inputs_as_tensors`) in dense row-major layout, as TensorRT bindings are
(`dense_inputs`); graph inputs and outputs are not memory planned (the
engine binds caller memory directly), and every KV write the plan aliases is a
`tte::kv_cache_update` whose cache is a graph input — the op the reference engine runs with its
output bound to that input's address (docs/CONTRACTS.md §2, §3). Everything else runs on
ExecuTorch's own portable/optimized kernels.
"""
from __future__ import annotations

from typing import Sequence, Tuple

import torch
from torch.fx import GraphModule

from ..lowering.graph_writes import example_args
from ..lowering.kv_rules import INDEX_COPY, SLICE_SCATTER, slice_write
from . import kv_op  # noqa: F401  (defines tte::kv_cache_update)
from .edge_replay import replayed_edge
from .lifted_program import lifted_program


def use_kv_update_layers(gm: GraphModule, kv_nodes: Sequence[str]) -> None:
    """Rewrite the named KV writes (slice_scatter / index_copy) into tte::kv_cache_update."""
    graph = gm.graph
    by_name = {n.name: n for n in graph.nodes}
    for i, name in enumerate(kv_nodes):
        node = by_name[name]
        cache = node.args[0]
        if node.target is SLICE_SCATTER:
            w = slice_write(node, tuple(cache.meta["val"].shape))
            src, dim = w.src, w.dim
            attr = f"_kv_positions_{i}"
            gm.register_buffer(attr, torch.arange(w.start, w.end, dtype=torch.int64),
                               persistent=True)
            with graph.inserting_before(node):
                index = graph.get_attr(attr)
                new = graph.call_function(kv_op.OP, (cache, dim, index, src))
        elif node.target is INDEX_COPY:
            _, dim, index, src = node.args[:4]
            with graph.inserting_before(node):
                new = graph.call_function(kv_op.OP, (cache, dim, index, src))
        else:
            raise ValueError(f"node {name!r} ({node.target}) is not a KV write")
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
    graph.lint()
    gm.recompile()


_SCALAR_DTYPES = ((torch.SymBool, bool, torch.bool), (torch.SymInt, int, torch.int64),
                  (torch.SymFloat, float, torch.float32))


def scalar_dtype(val: object):
    """The 0-d tensor dtype a symbolic (or Python) scalar binding travels as, or None when
    `val` is not a scalar."""
    for sym, py, dtype in _SCALAR_DTYPES:
        if isinstance(val, (sym, py)):
            return dtype
    return None


def scalar_inputs_as_tensors(gm: GraphModule) -> Tuple[Tuple[int, torch.dtype], ...]:
    """Engine inputs that are symbolic scalars — the SymInt/SymBool a TensorRT partition takes as
    a shape input (e.g. `input_pos[0].item()` of ExecuTorch's llama cache) — become 0-d tensor
    bindings (int64 / bool / float32) read back with `aten.item` inside the payload, so every
    binding of the engine is a tensor. Returns (input position, dtype) of each: the caller hands
    the engine `torch.scalar_tensor(value, dtype=dtype)` there."""
    graph = gm.graph
    converted = []
    for i, ph in enumerate([n for n in graph.nodes if n.op == "placeholder"]):
        val = ph.meta.get("val")
        dtype = scalar_dtype(val) if not isinstance(val, torch.Tensor) else None
        if dtype is None:
            continue
        with graph.inserting_after(ph):
            item = graph.call_function(torch.ops.aten.item.default, (ph,))
        item.meta["val"] = val
        ph.replace_all_uses_with(item, delete_user_cb=lambda u: u is not item)
        ph.meta["val"] = torch.empty((), dtype=dtype, device="meta")
        converted.append((i, dtype))
    if converted:
        graph.lint()
        gm.recompile()
    return tuple(converted)


def edge_config():
    """The edge config every payload is lowered with."""
    from executorch.exir import EdgeCompileConfig
    return EdgeCompileConfig(_check_ir_validity=False)


def program_bytes(edge) -> bytes:
    """An edge program manager's ExecuTorch program, graph inputs and outputs unplanned."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    et = edge.to_executorch(ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False),
        # a view of an (unplanned) engine input would have no storage of its own: keep copies
        remove_view_copy=False,
    ))
    return bytes(et.buffer)


def dense_inputs(gm: GraphModule) -> None:
    """Give every input of `gm` a dense (row-major contiguous) value and re-propagate the values
    after it. An engine is handed its inputs dense (`execute_op` passes `t.contiguous()`, as
    TensorRT takes its bindings), but a partition input can be a strided view in the partitioned
    graph — a `permute` PyTorch ran for the partition before. Lowered as such, ExecuTorch keeps
    the input's dim order, and its kernels refuse an operator mixing it with dense tensors (or
    would read the dense bytes as the permuted layout)."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    tensors = [v for v in vals if isinstance(v, torch.Tensor)]
    if all(v.is_contiguous() for v in tensors):
        return
    from torch._guards import detect_fake_mode
    mode = detect_fake_mode(tensors)   # a scalar input bound as 0-d is a plain meta tensor
    with mode:
        dense = [torch.empty(tuple(v.shape), dtype=v.dtype, device=v.device)
                 if isinstance(v, torch.Tensor) else v for v in vals]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*dense)


def _exported_edge(gm: GraphModule, dynamic_shapes, config):
    """The partition exported (its dynamic dims as `dynamic_shapes` says) and taken to edge."""
    from executorch.exir import to_edge
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
    try:
        ep = torch.export.export(gm, example_args(gm), dynamic_shapes=dynamic_shapes,
                                 strict=False)
        return to_edge(ep, compile_config=config)
    except GuardOnDataDependentSymNode as e:
        if dynamic_shapes is None:
            raise
        first = str(e).splitlines()[0]
        raise NotImplementedError(
            f"a reference engine cannot plan this dynamic-shape partition: its shapes depend "
            f"on a value read from a tensor ({first}) — a start position's `item()` slicing a "
            "table, as ExecuTorch's llama does with enable_dynamic_shape=True. Reference engines "
            "do not take such partitions yet: export that model with enable_dynamic_shape=False "
            "(a static prefill and decode), or pass positions as a tensor the model indexes "
            "with (as transformers' decoders do)") from None


def to_executorch_program(gm: GraphModule, dynamic_shapes=None) -> bytes:
    """Lower a partition GraphModule to ExecuTorch program bytes (inputs/outputs unplanned):
    where the partition is static and allows it, taken as a program without retracing
    (`lifted_program`) and each distinct operator call lowered once and replayed
    (`edge_replay`); else exported (with `dynamic_shapes`: `Dim`s bounded as the partition's
    symbols, so ExecuTorch plans every intermediate for the largest shape) and lowered through
    ExecuTorch's whole `to_edge`."""

    dense_inputs(gm)
    config = edge_config()
    lifted = lifted_program(gm) if dynamic_shapes is None else None
    edge = replayed_edge(lifted, config) if lifted is not None else None
    if edge is None:
        edge = _exported_edge(gm, dynamic_shapes, config)
    return program_bytes(edge)
