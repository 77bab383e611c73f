"""What a composite operator writes in place that its schema does not say.

Invariant: `hidden_writes(node)` lists the positions (argument index, name) of the tensors a call
of a CompositeImplicitAutograd operator writes in place when it runs, though its schema marks no
argument as written — found by running the call once on meta tensors of the arguments' shapes,
with the Python dispatcher on (as torch.export traces: torch's own decompositions of operators
whose schemas lie apply, `native_batch_norm` → `_native_batch_norm_legit`) under a dispatch mode
that sees the operators it decomposes into, whose schemas say what they write. Train-mode
`aten.batch_norm` is the case torch.export's training IR keeps: its schema is functional, its
running mean and variance are written by the batch norm it calls; fx's
dead-code elimination therefore deletes such a call whose result nothing reads, and the write with
it. An operator with a write-annotated argument, or without a composite kernel, is left to its
schema (`op_writes`); a call that cannot run on meta tensors is reported as writing nothing (what
its schema says). One result is kept per operator and non-tensor arguments.
"""
from __future__ import annotations

import torch
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import optimization_hint
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

_COMPOSITE: dict[object, bool] = {}      # op -> a composite kernel and no write-annotated argument
_SEEN: dict[tuple, tuple[tuple[int, str], ...]] = {}    # (op, argument pattern) -> positions


def _composite(op) -> bool:
    known = _COMPOSITE.get(op)
    if known is None:
        schema = getattr(op, "_schema", None)
        known = (isinstance(op, torch._ops.OpOverload) and schema is not None
                 and not any(a.alias_info is not None and a.alias_info.is_write
                             for a in schema.arguments)
                 and torch._C._dispatch_has_kernel_for_dispatch_key(
                     op.name(), torch._C.DispatchKey.CompositeImplicitAutograd))
        _COMPOSITE[op] = known
    return known


class _Writes(TorchDispatchMode):
    """Records which of `inputs` (meta tensors) the operators run under it write in place."""

    def __init__(self, inputs: list[torch.Tensor]):
        super().__init__()
        self.storages = [StorageWeakRef(t.untyped_storage()) for t in inputs]
        self.written: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is None or not a.alias_info.is_write:
                continue
            value = args[i] if i < len(args) else kwargs.get(a.name)
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(t, torch.Tensor):
                    ref = StorageWeakRef(t.untyped_storage())
                    self.written.update(k for k, s in enumerate(self.storages) if s == ref)
        return func(*args, **kwargs)


def _meta(value) -> object:
    """A meta tensor like `value` (a FakeTensor; symbolic sizes at their hints), a SymInt's hint,
    or `value` itself."""
    if isinstance(value, torch.Tensor):
        return torch.empty_strided([optimization_hint(s, 2) for s in value.shape],
                                   [optimization_hint(s, 1) for s in value.stride()],
                                   dtype=value.dtype, device="meta")
    if isinstance(value, torch.SymInt):
        return optimization_hint(value, 2)
    return value


def _pattern(arg) -> object:
    """The call's arguments with each node as one marker: the key of what it writes."""
    if isinstance(arg, Node):
        return ("node",)
    if isinstance(arg, (list, tuple)):
        return tuple(_pattern(a) for a in arg)
    return repr(arg)


def hidden_writes(node: Node) -> tuple[tuple[int, str], ...]:
    """(argument index, name) of each argument of `node` the composite op behind it writes
    in place though its schema does not say so (module docstring); () for every other node."""
    if node.op != "call_function" or not _composite(node.target):
        return ()
    schema = node.target._schema
    key = (node.target, _pattern(node.args), _pattern(tuple(sorted(node.kwargs.items()))))
    if key not in _SEEN:
        _SEEN[key] = _run(node, schema)
    return _SEEN[key]


def _run(node: Node, schema) -> tuple[tuple[int, str], ...]:
    from torch._dispatch.python import enable_python_dispatcher
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    inputs: list[torch.Tensor] = []
    owner: list[int] = []                # inputs[k] is (part of) argument owner[k]

    def meta(value, position: int):
        if isinstance(value, (list, tuple)):
            return type(value)(meta(v, position) for v in value)
        if not isinstance(value, Node):
            return value
        m = _meta(value.meta.get("val"))
        if isinstance(m, torch.Tensor):
            inputs.append(m)
            owner.append(position)
        return m

    names = [a.name for a in schema.arguments]
    try:
        with unset_fake_temporarily(), torch.no_grad(), enable_python_dispatcher():
            args = [meta(a, i) for i, a in enumerate(node.args)]
            kwargs = {k: meta(v, names.index(k)) for k, v in node.kwargs.items()}
            mode = _Writes(inputs)
            with mode:
                node.target(*args, **kwargs)
    except Exception:  # noqa: BLE001 - a call meta tensors cannot run: its schema decides
        return ()
    return tuple((i, names[i]) for i in sorted({owner[k] for k in mode.written}))


__all__ = ["hidden_writes"]
