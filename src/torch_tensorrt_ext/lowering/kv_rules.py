"""Will this buffer write become a TensorRT `IKVCacheUpdateLayer` (an aliased, in-place output)?

Invariant: `kv_verdict` reproduces the eligibility rules of torch-tensorrt 2.14.0's converters
(`slice_scatter` and `index_copy`) exactly — an `index_put` is judged as the converter form
`index_put_kv` rewrites it to — with two deliberate differences: a strided
`slice_scatter` (step != 1), which upstream's KV path accepts and silently miscompiles, is not
eligible here, and neither is an empty or reversed slice (end < start). Every "no" comes with a
reason a person can act on; a write is only ever called KV when every rule is proven on static
shapes.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Collection, Iterable, Sequence

import operator

import torch
from torch.fx import Node

from ..contracts.shape_text import shape_text
from .index_put_kv import INDEX_PUT, describe, kv_form

aten = torch.ops.aten
SLICE_SCATTER = aten.slice_scatter.default
INDEX_COPY = aten.index_copy.default
# Marker upstream's converters read: a node carrying it is never aliased.
NO_KV_ALIAS_MARKER = "_trt_no_kv_alias"
# Marker patch 0008's index_copy validator reads: the write's index was proven arange(n) + start
# on the whole graph (`mark_consecutive_writes`), where a partition may see only its inputs.
CONSECUTIVE_MARKER = "_trt_kv_consecutive_index"


@dataclass(frozen=True)
class Verdict:
    kv: bool
    reason: str


def read_after_write(cache: Node, write: Node, order: dict[Node, int],
                     ignore: Collection[Node] = ()) -> bool:
    """Whether something reads `cache` (its old value) after `write` in the graph order `order`
    — an in-place update by `write` would change what that read sees. `ignore`: users of
    `cache` that are not reads (its buffer's own trailing `copy_`)."""
    return any(u is not write and order[u] > order[write] and u not in ignore
               for u in cache.users)


def old_value_read(cache: Node, kv_write: Node, order: dict[Node, int],
                   ignore: Collection[Node] = ()) -> bool:
    """Whether `cache` is read after any write into it that may become an in-place KV update:
    each `slice_scatter`/`index_copy` of `cache` itself, and `kv_write` (the buffer's planned KV
    write, which may be an `index_put` lifting turns into one of those). It is enough to look
    after the first such write: a read after any later one is after the first too."""
    writes = [u for u in cache.users if u.args and u.args[0] is cache
              and (u is kv_write or u.target in (SLICE_SCATTER, INDEX_COPY))]
    if not writes:
        return False
    return read_after_write(cache, min(writes, key=order.__getitem__), order, ignore)


def op_name(node: Node) -> str:
    return op_name_of(node.target)


def static_shape(node: object) -> tuple[object, ...] | None:
    """The node's shape from meta['val'] (entries may be SymInts), or None if unknown."""
    if not isinstance(node, Node):
        return None
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    return tuple(val.shape)


def _is_static(shape: Sequence[object]) -> bool:
    return all(isinstance(s, int) and s >= 0 for s in shape)


def cache_shape_problem(shape: Sequence[object] | None) -> str | None:
    if shape is None:
        return None
    if not _is_static(shape):
        return (f"cache shape {shape_text(shape)} is dynamic; IKVCacheUpdateLayer needs a static "
                "s_max")
    if len(shape) != 4:
        return (f"rank {len(shape)} cache {shape_text(shape)}; KV update needs 4-D [b,d,s_max,h]")
    return None


@dataclass(frozen=True)
class SliceWrite:
    """A slice_scatter's write as the converter resolves it: defaults and kwargs filled in,
    negative bounds counted from the end (no clamping). `dim` is None when invalid."""

    src: object
    dim: int | None
    start: object
    end: object
    step: object


def slice_write(node: Node, cache_shape: Sequence[object]) -> SliceWrite:
    """Resolve `slice_scatter(cache, src, dim=0, start=None, end=None, step=1)` — the one place
    both the KV prediction and the reference engine's payload read the bounds from."""
    args = list(node.args) + [None] * (6 - len(node.args))
    _, src, dim, start, end, step = args[:6]
    dim = node.kwargs.get("dim", 0 if dim is None else dim)
    start = node.kwargs.get("start", start)
    end = node.kwargs.get("end", end)
    step = node.kwargs.get("step", 1 if step is None else step)
    rank = len(cache_shape)
    if not isinstance(dim, int) or not -rank <= dim < rank:
        return SliceWrite(src, None, start, end, step)
    size = cache_shape[dim]
    start = 0 if start is None else start
    end = size if end is None else end
    if isinstance(start, int) and start < 0 and isinstance(size, int):
        start += size
    if isinstance(end, int) and end < 0 and isinstance(size, int):
        end += size  # like the converter: negative bounds count from the end, no clamping
    return SliceWrite(src, dim, start, end, step)


def _slice_scatter_verdict(node: Node, cache_shape: Sequence[object]) -> Verdict:
    w = slice_write(node, cache_shape)
    if w.dim is None:
        return Verdict(False, f"slice_scatter dim {node.args[2] if len(node.args) > 2 else 0!r} "
                              f"is not a valid dim of a rank-{len(cache_shape)} cache")
    dim, start, end, step, size = w.dim, w.start, w.end, w.step, cache_shape[w.dim]
    if (isinstance(start, int) and isinstance(end, int) and isinstance(size, int)
            and start == 0 and end == size and step == 1):
        return Verdict(False, f"full overwrite of dim {dim} (slice {start}:{end}); the converter "
                              "returns the source and emits no KV layer")
    if not all(isinstance(v, int) for v in (start, end, step)):
        return Verdict(False, f"dynamic slice bounds (start={start}, end={end}, step={step}); "
                              "IKVCacheUpdateLayer needs concrete positions")
    problem = cache_shape_problem(cache_shape)
    if problem:
        return Verdict(False, problem)
    if dim != 2:
        return Verdict(False, f"write dim is {dim}; KV update needs the sequence dim 2 of "
                              "[b,d,s_max,h]")
    if step != 1:
        return Verdict(False, f"strided write (step {step}); upstream's KV path ignores the step "
                              "and miscompiles it, so it is copied back")
    s_max = cache_shape[2]
    if end > s_max or end < start:
        return Verdict(False, f"write [{start}:{end}] exceeds s_max {s_max} (the converter does "
                              "not clamp an open-ended slice)")
    return Verdict(True, f"slice_scatter of positions [{start}:{end}) along dim 2 of "
                         f"{shape_text(cache_shape)} -> IKVCacheUpdateLayer")


def _index_copy_verdict(node: Node, cache_shape: Sequence[object]) -> Verdict:
    if len(node.args) < 4:
        return Verdict(False, "index_copy with fewer than 4 arguments")
    dim, index, src = node.args[1:4]
    problem = cache_shape_problem(cache_shape)
    if problem:
        return Verdict(False, problem)
    if cache_shape[0] != 1:
        return Verdict(False, f"batch {cache_shape[0]}; the index_copy KV path handles "
                              "batch 1 only")
    if dim != 2:
        return Verdict(False, f"write dim is {dim}; KV update needs the sequence dim 2 of "
                              "[b,d,s_max,h]")
    src_shape = static_shape(src)
    if src_shape is None:
        return Verdict(False, f"source {getattr(src, 'name', src)!r} has no meta['val']; "
                              "cannot prove a single-position write")
    if len(src_shape) != 4:
        return Verdict(False, f"source {shape_text(src_shape)} is not 4-D [b,d,s,h]")
    if isinstance(src_shape[2], int) and src_shape[2] == 1:
        return Verdict(True, f"index_copy of one position along dim 2 of "
                             f"{shape_text(cache_shape)} -> IKVCacheUpdateLayer")
    if node.meta.get(CONSECUTIVE_MARKER) or consecutive_positions(index):
        return Verdict(True, f"index_copy of {src_shape[2]} consecutive positions from a runtime "
                             f"start (index arange + start) along dim 2 of "
                             f"{shape_text(cache_shape)} -> IKVCacheUpdateLayer")
    return Verdict(False, f"writes {src_shape[2]} positions (source {shape_text(src_shape)}) at "
                          f"index {getattr(index, 'name', index)!r}, which is not arange(n) + "
                          "start; the index_copy KV path writes one position, or consecutive "
                          "ones from a start")


_ARANGES = (aten.arange.default, aten.arange.start, aten.arange.start_step)


def _counts_from_zero(node: object) -> bool:
    """`arange(n)`, `arange(0, n)` or `arange(0, n, 1)`: 0, 1, ..., n-1."""
    if not isinstance(node, Node) or node.target not in _ARANGES:
        return False
    if node.target is aten.arange.default:
        return True
    start = node.args[0] if node.args else node.kwargs.get("start", 0)
    step = node.args[2] if len(node.args) > 2 else node.kwargs.get("step", 1)
    return start == 0 and step == 1


def _one_value(node: object) -> bool:
    """A scalar (Python or symbolic), or a tensor of one element."""
    if isinstance(node, (int, torch.SymInt)):
        return True
    val = node.meta.get("val") if isinstance(node, Node) else None
    if isinstance(val, (int, torch.SymInt)):
        return True
    return isinstance(val, torch.Tensor) and all(isinstance(s, int) and s == 1
                                                 for s in val.shape)


def mark_consecutive_writes(nodes: Iterable[Node]) -> None:
    """Mark each multi-position `index_copy` among `nodes` whose index is `arange(n) + start`
    (`CONSECUTIVE_MARKER`), while the whole graph is visible: once partitioned, the index may be
    an input of the engine that writes the cache."""
    for node in nodes:
        if node.target is INDEX_COPY and len(node.args) >= 4 and \
                consecutive_positions(node.args[2]):
            node.meta[CONSECUTIVE_MARKER] = True


def consecutive_positions(index: object) -> bool:
    """Whether an `index_copy` index is `arange(n) + start` (either operand order): n consecutive
    positions from a start known only at run time — what `IKVCacheUpdateLayer` writes from the
    index's first element. (`index_copy` itself requires n to be the source's length.)"""
    if not isinstance(index, Node) or index.target is not aten.add.Tensor or \
            len(index.args) != 2 or index.kwargs.get("alpha", 1) != 1:
        return False
    a, b = index.args
    return (_counts_from_zero(a) and _one_value(b)) or (_counts_from_zero(b) and _one_value(a))


def effective_cache_input(cache: object, root: Node) -> object:
    """What the converter will be handed as the cache: lowering erases a `clone` of the buffer
    when the clone is the buffer's only reader, so `clone(buffer) -> write` aliases too."""
    if (isinstance(cache, Node) and cache.target is aten.clone.default and cache.args[0] is root
            and all(u is cache or u.target is aten.copy_.default for u in root.users)):
        return root
    return cache


def writer_op(value: Node) -> str:
    """The op that produces a buffer's new value, as a person would name it: the aten/custom
    op, or — for an output of a higher-order op — the custom op that `auto_functionalized`
    wraps (a torch.library op with a mutating schema) or the higher-order op itself."""
    if value.op != "call_function":
        return value.op
    hop = value.args[0] if value.target is operator.getitem and value.args else None
    if isinstance(hop, Node) and hop.op == "call_function" and not hasattr(hop.target, "_schema"):
        wrapped = hop.args[0] if hop.args else None
        if getattr(hop.target, "__name__", "").startswith("auto_functionalized") and \
                hasattr(wrapped, "_schema"):
            ns, _, name = wrapped._schema.name.partition("::")
            return f"{ns}.{name}.{wrapped._schema.overload_name or 'default'}"
        return getattr(hop.target, "__name__", str(hop.target))
    return op_name(value)


def _non_aten_writer(value: Node, name: str) -> Verdict:
    hop = value.args[0] if value.target is operator.getitem and value.args else None
    if isinstance(hop, Node) and getattr(hop.target, "__name__", "").startswith(
            "auto_functionalized"):
        return Verdict(False, f"written in place by custom op {name} (a torch.library op whose "
                              "schema mutates the buffer); it has no IKVCacheUpdateLayer "
                              "converter, so the new value is copied back")
    if hop is not None:
        return Verdict(False, f"written by higher-order op {name} (e.g. torch.cond); copied back")
    return Verdict(False, f"written by {name}, which is not an ATen op; copied back")


def _index_put_verdict(value: Node, cache_shape: Sequence[object],
                       excluded_ops: frozenset) -> Verdict:
    form = kv_form(value, cache_shape)
    if isinstance(form, str):
        return Verdict(False, form)
    problem = cache_shape_problem(cache_shape)
    if problem:
        return Verdict(False, problem)
    target = INDEX_COPY if form.op == "index_copy" else SLICE_SCATTER
    if target in excluded_ops or op_name_of(target) in excluded_ops:
        return Verdict(False, f"{describe(form)}, but {op_name_of(target)} is in "
                              "torch_executed_ops: no engine can alias the write")
    if form.op == "index_copy":
        if cache_shape[0] != 1:
            return Verdict(False, f"{describe(form)}; batch {cache_shape[0]}: the index_copy KV "
                                  "path handles batch 1 only")
        return Verdict(True, f"{describe(form)} along dim 2 of {shape_text(cache_shape)} "
                             "-> IKVCacheUpdateLayer")
    if form.start == 0 and form.end == cache_shape[2]:
        return Verdict(False, f"{describe(form)}: a full overwrite of dim 2; the converter "
                              "returns the source and emits no KV layer")
    return Verdict(True, f"{describe(form)} along dim 2 of {shape_text(cache_shape)} "
                         "-> IKVCacheUpdateLayer")


def op_name_of(target: object) -> str:
    """An op's name as `torch_executed_ops` spells it ("aten.index_copy.default"); a target
    without a schema (a Python function) by its own name — the one op-name helper."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return getattr(target, "__name__", str(target))
    ns, _, name = schema.name.partition("::")
    return f"{ns}.{name}.{schema.overload_name or 'default'}"


def kv_verdict(value: Node, root: Node, cache_shape: Sequence[object] | None,
               excluded_ops: frozenset) -> Verdict:
    """Whether the write producing `value` into the buffer read through `root` is KV-aliased."""
    name = writer_op(value)
    if value.op != "call_function":
        return Verdict(False, f"new value comes from a {value.op} node {value.name!r}, not an op")
    if name in excluded_ops or value.target in excluded_ops:
        return Verdict(False, f"{name} is in torch_executed_ops: it runs outside TensorRT, so no "
                              "engine can alias the write")
    if value.meta.get(NO_KV_ALIAS_MARKER):
        return Verdict(False, f"node {value.name!r} is marked {NO_KV_ALIAS_MARKER}")
    if value.target not in (SLICE_SCATTER, INDEX_COPY, INDEX_PUT):
        if not hasattr(value.target, "_schema"):
            return _non_aten_writer(value, name)
        return Verdict(False, f"{name} has no IKVCacheUpdateLayer converter; the new value is "
                              "copied back")
    cache = effective_cache_input(value.args[0], root)
    if cache is not root:
        return Verdict(False, f"{name} writes into {getattr(cache, 'name', cache)!r}, not the "
                              "buffer itself (written earlier in the same call); only a direct "
                              "network input can be aliased")
    if cache_shape is None:
        return Verdict(False, f"no meta['val'] on {root.name!r}; cache shape unknown")
    if value.target is SLICE_SCATTER:
        return _slice_scatter_verdict(value, cache_shape)
    if value.target is INDEX_PUT:
        return _index_put_verdict(value, cache_shape, excluded_ops)
    return _index_copy_verdict(value, cache_shape)


def aliased_in_partition(node: Node, inputs: Collection[Node], order: dict[Node, int]) -> bool:
    """Whether TensorRT's converters alias `node`, a node of one partition's graph: a KV-eligible
    `slice_scatter`/`index_copy` into one of the partition's `inputs` (placeholders), not marked
    `_trt_no_kv_alias`, whose cache nothing reads after it (`order`: the partition's node order)
    — the one rule the reference builder and the partition-output order both read."""
    if node.target not in (SLICE_SCATTER, INDEX_COPY) or node.args[0] not in inputs:
        return False
    if node.meta.get(NO_KV_ALIAS_MARKER):
        return False
    cache = node.args[0]
    if read_after_write(cache, node, order):
        return False  # an in-place write would change what a later read of the cache sees
    shape = tuple(cache.meta["val"].shape) if "val" in cache.meta else None
    return kv_verdict(node, cache, shape, frozenset()).kv
