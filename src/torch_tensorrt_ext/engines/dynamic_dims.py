"""The dynamic dimensions of an engine's bindings (a prefill's sequence length): the reference
engine's partition at compile, and `max_shape` of any engine's binding from its value in the
program (a TensorRT engine's blob, at save).

Invariant: a partition is built with dynamic dimensions only where each is one backed symbol
with a finite upper bound: an input binding's dynamic dimension is `-1` in its shape and its
bound in `max_shape` (the memory ExecuTorch plans for it), and every dynamic dimension of an
output binding is a symbol some input dimension carries — recorded as that input dimension
(`OutputDim`), so the PyTorch fake kernel and every reader give each output its shape from the
inputs' shapes alone. Anything else (an unbounded symbol, an output dimension `2*s0` or
data-dependent) is refused at compile, naming the binding and the expression.
`carried_symbols(inputs)` and `returnable(val, carried)` are that rule for a result as one
predicate (`compiling/host_results` moves the results it refuses out of the partition first);
`PartitionDims` refuses exactly the results it rejects.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable, Sequence

import torch
from torch.fx import GraphModule, Node
from ..errors import Unsupported
from ..lowering.scalar_facts import sym_expr as _expr

__all__ = ["OutputDim", "PartitionDims", "carried_symbols", "partition_dims", "max_shape",
           "returnable"]


@dataclass(frozen=True)
class OutputDim:
    """Output dimension `dim` is input `input`'s dimension `input_dim` (in this call)."""

    dim: int
    input: int
    input_dim: int


def carried_symbols(inputs: Iterable[Node]) -> set:
    """The symbols some dimension of a tensor input among `inputs` is."""
    vals = (n.meta.get("val") for n in inputs)
    return {_expr(s) for v in vals if isinstance(v, torch.Tensor) for s in v.shape
            if _expr(s) is not None}


def returnable(val, carried) -> bool:
    """Whether an engine whose inputs carry the symbols `carried` returns `val`: a tensor whose
    every dimension is a constant or one of them, or an integer that is one of them."""
    if isinstance(val, torch.Tensor):
        return all(_expr(s) is None or _expr(s) in carried for s in val.shape)
    return isinstance(val, torch.SymInt) and _expr(val) in carried


def _bounds(size) -> tuple[int, int]:
    """(min, max) of a symbolic size, from its shape environment's ranges."""
    env = size.node.shape_env
    expr = size.node.expr
    r = env.bound_sympy(expr) if env is not None else None
    lo = int(r.lower) if r is not None and r.lower.is_finite else 0
    hi = r.upper if r is not None else None
    if hi is None or not hi.is_finite or int(hi) > 2**31 - 1:
        raise Unsupported(
            f"dimension {expr} has no finite upper bound; give it one (torch.export.Dim(..., "
            "max=N) or torch_tensorrt.Input(max_shape=...)): an engine binding's memory is "
            "planned for its largest shape")
    return lo, int(hi)


def max_shape(val: torch.Tensor, shape: Sequence[int], name: str) -> tuple[int, ...]:
    """The max_shape of a binding of `shape` (-1: dynamic) whose value in the graph is `val`:
    each dynamic dimension's upper bound (refused naming the binding when it has none); () for a
    static binding."""
    if all(s >= 0 for s in shape):
        return ()
    if len(val.shape) != len(shape):
        raise Unsupported(f"engine binding {name!r} has shape {list(shape)}, its value "
                                  f"in the graph {list(val.shape)}")
    out = []
    for s, v in zip(shape, val.shape, strict=False):
        if s >= 0:
            out.append(s)
        elif isinstance(v, torch.SymInt):
            out.append(_bounds(v)[1])
        else:
            out.append(int(v))
    return tuple(out)


@dataclass(frozen=True)
class PartitionDims:
    """Where each symbol first appears among the inputs, and its bounds."""

    first: dict[object, tuple[int, int]]          # symbol -> (input index, dimension)
    bounds: dict[object, tuple[int, int]]         # symbol -> (min, max)

    def input_shapes(self, val: torch.Tensor, name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """An input binding's (shape with -1, max_shape or ())."""
        return self._shapes(val, name)

    def output_shapes(self, val: torch.Tensor, name: str
                      ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[OutputDim, ...]]:
        """An output binding's (shape with -1, max_shape or (), the input dims it takes)."""
        shape, bound = self._shapes(val, name)
        sources = []
        for k, s in enumerate(val.shape):
            expr = _expr(s)
            if expr is None:
                continue
            if not returnable(s, self.first):
                raise Unsupported(
                    f"engine output {name!r} has dimension {k} = {expr}, which no engine input "
                    f"dimension is; a reference engine sizes each dynamic output dimension as "
                    f"one of its inputs' (shape {list(val.shape)})")
            i, d = self.first[expr]
            sources.append(OutputDim(k, i, d))
        return shape, bound, tuple(sources)

    def input_dim_of(self, val, name: str) -> tuple[int, int]:
        """(input, dim) whose size a symbolic-int result `val` is (refused when none is)."""
        expr = _expr(val)
        if not returnable(val, self.first):
            raise Unsupported(
                f"engine {name} is the integer {val}, which is no engine input's dimension; a "
                "reference engine returns tensors and its inputs' sizes only")
        return self.first[expr]

    def _shapes(self, val: torch.Tensor, name: str):
        shape, bound, dynamic = [], [], False
        for k, s in enumerate(val.shape):
            expr = _expr(s)
            if expr is None:
                shape.append(int(s))
                bound.append(int(s))
                continue
            if expr not in self.bounds:
                if not expr.is_Symbol:
                    raise Unsupported(
                        f"engine binding {name!r} has dimension {k} = {expr}; a reference engine "
                        f"takes dynamic dimensions that are one symbol each (shape "
                        f"{list(val.shape)})")
                self.bounds[expr] = _bounds(s)
            shape.append(-1)
            bound.append(self.bounds[expr][1])
            dynamic = True
        return tuple(shape), (tuple(bound) if dynamic else ())

    def export_spec(self, gm: GraphModule) -> tuple | None:
        """`dynamic_shapes` for `torch.export.export(gm, ...)`: one `Dim` per symbol, with its
        bounds (None when nothing is dynamic)."""
        if not self.first:
            return None
        dims = {e: torch.export.Dim(f"d{n}", min=max(lo, 0), max=hi)
                for n, (e, (lo, hi)) in enumerate(self.bounds.items())}
        spec = []
        for ph in (n for n in gm.graph.nodes if n.op == "placeholder"):
            val = ph.meta.get("val")
            if not isinstance(val, torch.Tensor):
                spec.append(None)
                continue
            spec.append({k: dims[_expr(s)] for k, s in enumerate(val.shape)
                         if _expr(s) is not None} or None)
        return tuple(spec)


def partition_dims(inputs: Sequence[Node]) -> PartitionDims:
    """The symbols of a partition's input dimensions (refused as the module docstring says)."""
    dims = PartitionDims({}, {})
    for i, ph in enumerate(inputs):
        val = ph.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        dims.input_shapes(val, ph.name)          # checks each dim, records its bounds
        for k, s in enumerate(val.shape):
            expr = _expr(s)
            if expr is not None:
                dims.first.setdefault(expr, (i, k))
    return dims
