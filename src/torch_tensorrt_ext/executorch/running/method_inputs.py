"""The tensor inputs a method of a `.pte` takes, and the refusal of a call that does not fit.

Invariant: `input_specs(plan)` is read from the program flatbuffer alone (each input's dtype,
rank, sizes and shape dynamism as emitted: a dynamic-bound input's sizes are its upper bounds,
the memory ExecuTorch planned for it). `check_call` refuses, before anything runs — so no state
changes — a tensor argument of another rank, a static input of other sizes, or a dynamic one
beyond its bounds, naming the method, the input, the shape given and the bounds; anything it
lets through ExecuTorch accepts as far as shapes go.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

import torch

from ...contracts.shape_text import shape_text
from ...errors import TteError

__all__ = ["InputSpec", "InputShapeError", "input_specs", "check_call", "specs_by_method"]


class InputShapeError(TteError, ValueError):
    """A call's tensor input does not fit the method's input: the message names the method,
    the input, the shape given and the sizes or bounds it takes."""


@dataclass(frozen=True)
class InputSpec:
    sizes: tuple[int, ...]   # static sizes, or the upper bounds of a dynamic-bound input
    dynamic: bool

    def describe(self) -> str:
        return f"at most {shape_text(self.sizes)}" if self.dynamic else shape_text(self.sizes)


def input_specs(plan) -> tuple[InputSpec | None, ...]:
    """Per input of an `ExecutionPlan` (executorch.exir.schema): its spec, None for a non-tensor."""
    from executorch.exir import schema
    out = []
    for i in plan.inputs:
        val = plan.values[i].val
        if not isinstance(val, schema.Tensor):
            out.append(None)
            continue
        dynamic = val.shape_dynamism != schema.TensorShapeDynamism.STATIC
        out.append(InputSpec(tuple(int(s) for s in val.sizes), dynamic))
    return tuple(out)


def check_call(method: str, specs: Sequence[InputSpec | None], args: Sequence[object]) -> None:
    for k, (spec, arg) in enumerate(zip(specs, args, strict=False)):
        if spec is None or not isinstance(arg, torch.Tensor):
            continue
        shape = tuple(arg.shape)
        fits = len(shape) == len(spec.sizes) and all(
            (s <= b) if spec.dynamic else (s == b) for s, b in zip(shape, spec.sizes, strict=False))
        if not fits:
            kind = "dynamic input" if spec.dynamic else "input"
            raise InputShapeError(
                f"method {method!r}: {kind} {k} takes shapes {spec.describe()}; this call gives "
                f"{shape_text(shape)} (nothing ran, the state is as it was)")


def specs_by_method(program) -> dict[str, tuple[InputSpec | None, ...]]:
    return {p.name: input_specs(p) for p in program.execution_plan}
