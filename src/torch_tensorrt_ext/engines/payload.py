"""Build a reference engine's payload: one partition as an ExecuTorch program of its own.

Invariant: the payload's method `forward` takes the partition's inputs in binding order and
returns its outputs in binding order, every binding a tensor (a symbolic scalar input is bound as
a 0-d tensor, `scalar_inputs_as_tensors`) in dense row-major layout, as TensorRT bindings are
(`dense_inputs`); graph inputs and outputs are not memory planned (the
engine binds caller memory directly), and every KV write the plan aliases is a
`tte::kv_cache_update` whose cache is a graph input — the op the reference engine runs with its
output bound to that input's address (docs/CONTRACTS.md §2, §3). Everything else runs on
ExecuTorch's own portable/optimized kernels, each call in a form they compute as ATen does
(`kernel_forms`, after `prims_to_aten`).
"""
from __future__ import annotations

import contextlib
import logging
import operator
import warnings
from collections.abc import Sequence

import torch
from torch.fx import GraphModule, Node

from ..lowering.graph_writes import example_args
from ..lowering.kv_rules import INDEX_COPY, SLICE_SCATTER, slice_write
from ..lowering.scalar_facts import assert_facts, program_facts
from . import kv_op  # noqa: F401  (defines tte::kv_cache_update)
from .dynamic_copies import copies_as_broadcasts
from .edge_replay import replayed_edge
from .kernel_forms import is_dense, kernel_forms
from .lifted_program import lifted_program
from .prims_to_aten import prims_to_aten
from ..errors import Unsupported, UsageError

_log = logging.getLogger("torch_tensorrt_ext")


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
            raise UsageError(f"node {name!r} ({node.target}) is not a KV write")
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


def scalar_inputs_as_tensors(gm: GraphModule) -> tuple[tuple[int, torch.dtype], ...]:
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
        ph.replace_all_uses_with(item, delete_user_cb=lambda u: u is not item)  # noqa: B023 (run now)
        ph.meta["val"] = torch.empty((), dtype=dtype, device="meta")
        converted.append((i, dtype))
    if converted:
        graph.lint()
        gm.recompile()
    return tuple(converted)


def bind_scalar_reads(gm: GraphModule, first: dict[object, tuple[int, int]]) -> None:
    """Give the partition's export what the program knows about each scalar input it reads back
    (`scalar_inputs_as_tensors`). `first`: symbol -> (input, dim) where an input tensor carries it.

    A scalar that is an input's dimension (a prefill's length handed over as a SymInt too) is read
    as that dimension (`aten.sym_size.int`), so the export knows the two are one size. A scalar
    read from data (ExecuTorch llama's `input_pos[-1].item()` start position) keeps its
    `aten.item`, followed by the program's facts about it as `aten._assert_scalar` checks: its
    range, and each runtime assertion the program recorded over it and the partition's other
    symbols (`start + T <= max_context_len` for a `narrow` at that start), which lets the
    partition's export decide the same guards the program's did. Before the facts, every other
    input dimension that carries a symbol of theirs is asserted equal to the one they read: the
    export traces each input dimension as a symbol of its own and unifies them only where an op
    meets two, after which a fact stated over the replaced symbol no longer decides anything
    (ExecuTorch Gemma 4's attention over the cache prefix `[:start + T]` was left sized
    `Max(0, Min(16, start + T) - start)`, which ExecuTorch's memory planning cannot order).
    Nothing else changes."""
    import sympy

    graph = gm.graph
    phs = [n for n in graph.nodes if n.op == "placeholder"]
    reads = _inputs_then_reads(graph, phs)
    bound: dict[object, Node] = {}
    env = None
    for item in reads:
        val = item.meta.get("val")
        if not isinstance(val, torch.SymInt):
            continue
        expr, env = val.node.expr, val.node.shape_env
        if expr in first:
            i, d = first[expr]
            with graph.inserting_before(item):   # after every input
                size = graph.call_function(torch.ops.aten.sym_size.int, (phs[i], d))
            size.meta["val"] = val
            item.replace_all_uses_with(size)
            graph.erase_node(item)
        elif isinstance(expr, sympy.Symbol):
            bound[expr] = item
    facts = program_facts(env, bound, first) if bound and env is not None else []
    if facts:
        from torch.fx.experimental.symbolic_shapes import free_symbols
        last = [n for n in reads if n in bound.values()][-1]
        with graph.inserting_before(last.next):     # in order, after the last scalar read
            sizes = {e: graph.call_function(torch.ops.aten.sym_size.int, (phs[i], d))
                     for e, (i, d) in first.items()
                     if e not in bound and any(e in free_symbols(f) for f in facts)}
            same = [(e, graph.call_function(operator.eq, (graph.call_function(
                        torch.ops.aten.sym_size.int, (ph, d)), sizes[e])))
                    for e, ph, d in _same_dims(phs, first, sizes)]
            for e, check in same:       # one size, as the facts say it
                graph.call_function(torch.ops.aten._assert_scalar.default,
                                    (check, f"the program's dimension {e}"))
            assert_facts(graph, facts, {**bound, **sizes})
    graph.lint()
    gm.recompile()


def _inputs_then_reads(graph, phs) -> list:
    """Order the graph's inputs, then their `aten.item` reads, before everything else (a
    partition may take an input after an op); returns the reads."""
    reads = [n for n in graph.nodes if n.op == "call_function"
             and n.target is torch.ops.aten.item.default and n.args[0] in phs]
    ordered = [*phs, *reads]
    placed = set(ordered)
    anchor = next(n for n in graph.nodes if n not in placed)
    for n in ordered:
        anchor.prepend(n)
    return reads


def _same_dims(phs, first, symbols):
    """(symbol, input, dim) for each input dimension that carries one of `symbols` other than
    the one `first` reads it from."""
    for i, ph in enumerate(phs):
        val = ph.meta.get("val")
        for d, size in enumerate(val.shape if isinstance(val, torch.Tensor) else ()):
            e = size.node.expr if isinstance(size, torch.SymInt) else None
            if e in symbols and first[e] != (i, d):
                yield e, ph, d


def edge_config():
    """The edge config every payload is lowered with."""
    from executorch.exir import EdgeCompileConfig
    return EdgeCompileConfig(_check_ir_validity=False)


def byte_tensor(data) -> torch.Tensor:
    """`data` (bytes, bytearray, memoryview) as a uint8 tensor over the same memory, not a copy:
    an engine is as large as its weights. Nothing writes an engine's bytes (the legacy exporter
    registers this tensor itself as its buffer), so read-only memory is fine; torch warns about
    it, not here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        return torch.frombuffer(data, dtype=torch.uint8)


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
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    if not all(is_dense(v) for v in vals if isinstance(v, torch.Tensor)):
        _propagate_dense(gm)


def _propagate_dense(gm: GraphModule) -> None:
    """Re-propagate `gm`'s values from dense inputs of its inputs' shapes and dtypes."""
    from torch._guards import detect_fake_mode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    with mode:   # a scalar input bound as 0-d is a plain meta tensor
        dense = [torch.empty(tuple(v.shape), dtype=v.dtype, device=v.device)
                 if isinstance(v, torch.Tensor) else v for v in vals]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*dense)


_LAYOUT_KEEPING_COPIES = frozenset({torch.ops.aten._to_copy.default, torch.ops.aten.clone.default})


def dense_copies(gm: GraphModule) -> None:
    """A copy keeping its source's layout (`_to_copy` / `clone`, memory format unset or
    `preserve_format`) of a value that is not row-major makes a row-major copy instead:
    ExecuTorch's dim-order copies map only the contiguous and channels-last orders and refuse
    any other ("Failed to map a given dim_order: [1, 0]": `b.t()[1].copy_(v)` left to PyTorch,
    then `b.float()` in an engine — the partition's transposed input made dense by
    `dense_inputs`, transposed back by a `permute`). Same elements; values re-propagated."""
    changed = False
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target not in _LAYOUT_KEEPING_COPIES or \
                n.kwargs.get("memory_format", torch.preserve_format) is not torch.preserve_format:
            continue
        src = n.args[0].meta.get("val") if isinstance(n.args[0], Node) else None
        if isinstance(src, torch.Tensor) and not is_dense(src):
            n.update_kwarg("memory_format", torch.contiguous_format)
            changed = True
    if changed:
        gm.recompile()
        _propagate_dense(gm)


def dense_constants(gm: GraphModule) -> None:
    """Make every tensor constant of `gm` (a `get_attr` target) dense row-major, its value and
    its recorded fake value alike. torch-tensorrt's constant folding freezes an `expand` of a
    parameter (transformers' Mamba2 mixer: `A`, `D`, `dt_bias` expanded per head dim) and keeps
    the expand's stride-0 fake value on the frozen constant; ExecuTorch refuses a tensor with a
    0 stride and would plan a non-dense one in its recorded layout. The values are the same;
    a non-dense tensor is copied dense once (its expanded size)."""
    from torch._subclasses.fake_tensor import FakeTensor
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        owner_path, _, name = node.target.rpartition(".")
        owner = gm.get_submodule(owner_path) if owner_path else gm
        t = getattr(owner, name, None)
        if isinstance(t, torch.Tensor) and not is_dense(t):
            dense = t.clone(memory_format=torch.contiguous_format)
            if isinstance(t, torch.nn.Parameter):
                dense = torch.nn.Parameter(dense, requires_grad=False)
            if name in owner._buffers:
                owner._buffers[name] = dense
            else:
                setattr(owner, name, dense)
        val = node.meta.get("val")
        if isinstance(val, FakeTensor) and not is_dense(val):
            with val.fake_mode:
                node.meta["val"] = torch.empty(tuple(val.shape), dtype=val.dtype,
                                               device=val.device)


def _exported_edge(gm: GraphModule, dynamic_shapes, config):
    """The partition exported (its dynamic dims as `dynamic_shapes` says) and taken to edge."""
    from executorch.exir import to_edge
    with _plannable(dynamic_shapes is not None):
        ep = torch.export.export(gm, example_args(gm), dynamic_shapes=dynamic_shapes,
                                 strict=False)
        return to_edge(ep, compile_config=config)


@contextlib.contextmanager
def _plannable(dynamic: bool):
    """A guard on a data-dependent size while a dynamic partition is exported, lowered or
    planned, raised as the refusal it is (a static partition's is not caught: a bug)."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
    try:
        yield
    except GuardOnDataDependentSymNode as e:
        if not dynamic:
            raise
        first = str(e).splitlines()[0]
        raise Unsupported(
            f"a reference engine cannot plan this dynamic-shape partition: its shapes depend "
            f"on a value read from a tensor ({first}) that the program does not bound. Bound it "
            "where the model reads it, as ExecuTorch's llama does (torch._check(start >= 0), "
            "torch._check(start + seq_len <= max_len)), or pass positions as a tensor the model "
            "indexes with (as transformers' decoders do)") from None


def to_executorch_program(gm: GraphModule, dynamic_shapes=None) -> bytes:
    """Lower a partition GraphModule to ExecuTorch program bytes (inputs/outputs unplanned):
    where the partition is static and allows it, taken as a program without retracing
    (`lifted_program`) and each distinct operator call lowered once and replayed
    (`edge_replay`); else exported (with `dynamic_shapes`: `Dim`s bounded as the partition's
    symbols, so ExecuTorch plans every intermediate for the largest shape) and lowered through
    ExecuTorch's whole `to_edge` (a copy into a view of dynamic size first made the broadcast
    it computes, `dynamic_copies`)."""

    prims_to_aten(gm)     # ATen for the prims torch-tensorrt's decompositions leave
    kernel_forms(gm)      # forms ExecuTorch's kernels compute like eager
    dense_inputs(gm)
    dense_copies(gm)
    dense_constants(gm)
    if dynamic_shapes is not None:
        copies_as_broadcasts(gm)   # a copy into a dynamic view: its export cannot decide it
    config = edge_config()
    lifted = lifted_program(gm) if dynamic_shapes is None else None
    edge = replayed_edge(lifted, config) if lifted is not None else None
    if edge is None:
        _log.info("reference payload of %d operator calls lowered through torch.export and "
                  "ExecuTorch's whole to_edge: %s", sum(n.op == "call_function"
                                                        for n in gm.graph.nodes),
                  "its shapes are dynamic" if dynamic_shapes is not None else
                  "it is not a static functional program (lifted_program)" if lifted is None
                  else "its calls do not lower one by one (edge_replay)")
        edge = _exported_edge(gm, dynamic_shapes, config)
    computed_outputs(edge.exported_program())
    with _plannable(dynamic_shapes is not None):
        return program_bytes(edge)


def computed_outputs(ep) -> None:
    """Make every output of the edge program `ep` a value one of its calls computes, and each
    a different one: an output that is an input (a partition of a call ExecuTorch removes as a
    no-op — `_to_copy` to the same dtype, a whole-tensor `slice`) or that repeats an earlier
    output becomes a `clone` of it. With graph inputs and outputs unplanned, ExecuTorch hands
    such an output back without its data (zeros where eager has the input's values)."""
    from executorch.exir.dialects._ops import ops as exir_ops
    from torch.export.graph_signature import TensorArgument
    graph = ep.graph_module.graph
    out = graph.output_node()
    seen, outs = set(), list(out.args[0])
    for i, (a, spec) in enumerate(zip(outs, ep.graph_signature.output_specs, strict=True)):
        if isinstance(a, Node) and (a.op == "placeholder" or a in seen):
            with graph.inserting_before(out):
                outs[i] = graph.call_function(exir_ops.edge.aten.clone.default, (a,))
            outs[i].meta["val"] = a.meta["val"]
            spec.arg = TensorArgument(outs[i].name)
        seen.add(outs[i])
    if outs != list(out.args[0]):
        out.args = (tuple(outs),)
        ep.graph_module.recompile()
