"""A reference engine's weights, kept out of its ExecuTorch program (CONTRACTS.md §2 "Weights").

Invariant: after `weights_as_inputs(gm)` every dense tensor constant of the partition of at least
`MIN_WEIGHT_BYTES`, of a dtype a binding takes (`contracts.dtypes`), is a trailing placeholder of
`gm` — after the partition's own inputs, in first-use order, one per distinct value (equal bytes,
dtype and shape are one input) — and the returned `WeightRef`s describe them in that order, each
keyed by the SHA-256 of its bytes: two engines (two methods) carrying the same bytes name one key,
and the program stores them once. An engine holds its weights as `held` gives them: a row-major
snapshot taken at build (as a TensorRT engine holds its own: the model's later writes never reach
it), one per `WeightRef` in the process while any engine holds it — a prefill and a decode engine
of one program, or two partitions of one method, hold one copy between them — each engine through
a view of its own (a constant of its own in the graph it is saved from). The blob holds the
program, the program's named data the weights (`executorch/saving/backend`).
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch
from torch.fx import GraphModule

from ..contracts.blob_model import KEY_PREFIX, WeightRef
from ..contracts.named_key import named_key
from ..contracts.dtypes import DTYPE_NAMES, dtype_name
from ..contracts.tensor_bytes import tensor_bytes

__all__ = ["MIN_WEIGHT_BYTES", "KEY_PREFIX", "weights_as_inputs", "held", "mismatch",
           "weight_key", "drop_attr", "attr_of"]

# Smaller constants (a scalar, the positions of a KV write) stay inside the program.
MIN_WEIGHT_BYTES = 256

# WeightRef -> the row-major snapshot engines hold; an entry lives while an engine holds a view
# of it (a view keeps its base alive)
_SNAPSHOTS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def weight_key(t: torch.Tensor) -> str:
    """The named-data key of a weight: the SHA-256 of its bytes (row-major, whatever its
    layout: `contracts.tensor_bytes`)."""
    return named_key(tensor_bytes(t))


def attr_of(gm: GraphModule, target: str):
    """The attribute a get_attr of `target` reads (None when there is none)."""
    owner, _, name = target.rpartition(".")
    return getattr(gm.get_submodule(owner) if owner else gm, name, None)


def drop_attr(gm: GraphModule, target: str) -> None:
    """Forget the attribute a weight was read from (no get_attr reads it any more): an export of
    the partition lifts every parameter it holds, read or not."""
    owner, _, name = target.rpartition(".")
    module = gm.get_submodule(owner) if owner else gm
    for table in (module._parameters, module._buffers):
        table.pop(name, None)
    module.__dict__.pop(name, None)


def _fake(gm: GraphModule, t: torch.Tensor):
    """A fake of `t` as its binding holds it: row-major, whatever `t`'s strides (a weight stored
    transposed is a view until `held` copies it)."""
    from torch._guards import detect_fake_mode
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    if mode is None:
        from torch._subclasses.fake_tensor import FakeTensorMode
        mode = FakeTensorMode()
    with mode:
        return torch.empty(tuple(t.shape), dtype=t.dtype, device=t.device)


def _placeholders_first(gm: GraphModule) -> list:
    """Move every placeholder (keeping their order: the inputs' order) ahead of the first other
    node — torch-tensorrt's partitions declare an input where it is first used — so a placeholder
    appended after them precedes every use."""
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    first = next((n for n in gm.graph.nodes if n.op != "placeholder"), None)
    for ph in phs if first is not None else ():
        first.prepend(ph)
    return phs


def weights_as_inputs(gm: GraphModule) -> list[tuple[WeightRef, torch.Tensor]]:
    """Turn `gm`'s tensor constants (dense, `payload.dense_constants`) of at least
    `MIN_WEIGHT_BYTES` into trailing placeholders; their refs and tensors in placeholder order."""
    graph = gm.graph
    last = _placeholders_first(gm)
    by_tensor: dict[int, torch.fx.Node] = {}
    by_ref: dict[WeightRef, torch.fx.Node] = {}   # equal bytes, dtype and shape: one input
    replaced: set[str] = set()
    out: list[tuple[WeightRef, torch.Tensor]] = []
    for node in [n for n in graph.nodes if n.op == "get_attr"]:
        t = attr_of(gm, node.target)
        if not isinstance(t, torch.Tensor) or t.nbytes < MIN_WEIGHT_BYTES or t.is_sparse \
                or t.dtype not in DTYPE_NAMES:   # a dtype no binding takes stays inside
            continue
        ph = by_tensor.get(id(t))
        ref = WeightRef(weight_key(t), dtype_name(t.dtype), tuple(t.shape)) if ph is None \
            else None
        ph = by_ref.get(ref, ph)
        if ph is None:
            anchor = last[-1] if last else None
            with (graph.inserting_after(anchor) if anchor is not None
                  else graph.inserting_before(next(iter(graph.nodes)))):
                ph = graph.placeholder(f"tte_weight_{len(out)}")
            ph.meta["val"] = _fake(gm, t)
            last.append(ph)
            by_ref[ref] = ph
            out.append((ref, t.detach()))
        by_tensor[id(t)] = ph
        node.replace_all_uses_with(ph)
        graph.erase_node(node)
        replaced.add(node.target)
    still_read = {n.target for n in graph.nodes if n.op == "get_attr"}
    for target in replaced - still_read:
        drop_attr(gm, target)
    if out:
        graph.lint()
        gm.recompile()
    return out


def held(weights: Sequence[tuple[WeightRef, torch.Tensor]]) -> list[torch.Tensor]:
    """The tensors an engine holds for `weights` (`weights_as_inputs`' pairs), in order: for each,
    a view of the process's one row-major snapshot of its `WeightRef` in host memory — taken now
    (a copy of the tensor, whatever its strides or device) unless a live engine holds one
    already."""
    out = []
    for ref, t in weights:
        snapshot = _SNAPSHOTS.get(ref)
        if snapshot is None:
            snapshot = torch.empty(tuple(t.shape), dtype=t.dtype).copy_(t.detach())
            _SNAPSHOTS[ref] = snapshot
        out.append(snapshot.view(snapshot.shape))
    return out


def mismatch(engine: str, refs: Sequence[WeightRef], tensors: Sequence[torch.Tensor]) -> str | None:
    """What is wrong with `tensors` as the weights `refs` describe (their number, each one's
    dtype and shape), naming engine and key; None when nothing is."""
    if len(tensors) != len(refs):
        return f"engine {engine!r} is handed {len(tensors)} weights for the {len(refs)} it holds"
    for r, w in zip(refs, tensors, strict=True):
        if dtype_name(w.dtype) != r.dtype or tuple(w.shape) != tuple(r.shape):
            return (f"engine {engine!r}, weight {r.key}: it is handed a {dtype_name(w.dtype)} "
                    f"{list(w.shape)} tensor for its {r.dtype} {list(r.shape)} weight")
    return None
