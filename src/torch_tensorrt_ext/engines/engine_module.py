"""The engine-module protocol: what compile and save ask of an engine module, whichever engine
it holds — torch-tensorrt's `TorchTensorRTModule` (a TensorRT / TensorRT-RTX engine) or this
project's `reference_engine.ReferenceEngineModule`.

Invariant: every question about an engine module is answered here and nowhere else — which
engine it is (`kind`), the copies its delegate makes (`copy_record`, written by `record_copy`
into the attribute `COPY_BACK_ATTR`), whether it makes them in PyTorch too
(`copies_in_pytorch`), how many of its outputs it returns (`returned_outputs`), which results
are its inputs' sizes (`size_outputs`, `sizes_read_in_graph`) and how the legacy exporter
inlines its call (`own_call`). A reference engine answers through members of its own class; a
TensorRT engine module, which carries none of this project's members, gets the answers its
runtime implies from the defaults here. No caller outside `engines/` reads an engine module's
class or kind (`tests/house/test_engine_protocol.py`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from ..contracts.plan import PlanError
from .tensorrt_info import COPY_BACK_KEY

__all__ = ["EngineModule", "COPY_BACK_ATTR", "OwnCall", "is_engine_module", "kind",
           "copy_record", "record_copy", "copies_in_pytorch", "returned_outputs",
           "size_outputs", "sizes_read_in_graph", "own_call"]

# The engine module's copy record: [output, input] of each output its delegate copies into its
# input after a call, as compile decided (`lowering.copier`). A TensorRT engine module holds it
# as a plain attribute of this name, which patch 0004's `TorchTensorRTModule._pack_engine_info`
# packs under the same metadata key; a reference engine module as a property over its blob
# metadata.
COPY_BACK_ATTR = COPY_BACK_KEY

_TENSORRT = "tensorrt"   # the kind of an engine module that names none (torch-tensorrt's own)


@runtime_checkable
class EngineModule(Protocol):
    """What every engine module has: its bindings' names, in order."""

    input_binding_names: Sequence[str]
    output_binding_names: Sequence[str]


def is_engine_module(module: object) -> bool:
    """`module` is an engine module (it reports binding names)."""
    return isinstance(module, EngineModule)


def kind(module: torch.nn.Module) -> str:
    """The engine's kind as its `EngineInfo` records it: 'reference', or 'tensorrt' for
    torch-tensorrt's module."""
    return getattr(module, "engine_kind", _TENSORRT)


def copy_record(module: torch.nn.Module) -> tuple[tuple[str, str], ...]:
    """The copies recorded in the engine module (`record_copy`), as (output, input) pairs."""
    return tuple((o, i) for o, i in getattr(module, COPY_BACK_ATTR, ()))


def record_copy(module: torch.nn.Module, output: str, input: str) -> None:
    """Write a copy into the engine's own record: a reference engine keeps it in its blob
    metadata (its kernel then copies in PyTorch too), a TensorRT engine as the attribute patch
    0004 packs into its serialized metadata; the ExecuTorch lowering and the delegate read it
    from there. A second copy of one output is refused naming the engine."""
    record = [list(p) for p in copy_record(module)]
    if any(p[0] == output for p in record):
        raise PlanError(f"engine {getattr(module, 'name', '?')!r}: output {output!r} is "
                        f"recorded as copied back twice (into {input!r} and an earlier input)")
    setattr(module, COPY_BACK_ATTR, record + [[output, input]])


def copies_in_pytorch(module: torch.nn.Module) -> bool:
    """The module performs its recorded copies when called in PyTorch (a reference engine's
    kernel does, as its delegate does); torch-tensorrt's runtime cannot copy into a buffer."""
    return bool(getattr(module, "copies_in_pytorch", False))


def returned_outputs(module: torch.nn.Module) -> int | None:
    """How many of its outputs the module returns, where that is fewer than the graph may read:
    torch-tensorrt's module drops the aliased outputs after its last user output
    (`user_output_count`) and returns a lone remaining output bare. None where the module returns
    every result the graph reads (a reference engine; an engine aliasing nothing)."""
    if kind(module) == "reference" or not getattr(module, "aliased_io", None):
        return None
    from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import user_output_count
    return user_output_count(list(module.output_binding_names), module.aliased_io)


def size_outputs(module: torch.nn.Module) -> tuple[tuple[int, int, int], ...]:
    """(result position, input, dim) of each result that is an input's size (a partition handing
    a dynamic length on); a TensorRT engine's results are all bindings."""
    return tuple(getattr(module, "size_outputs", ()))


def sizes_read_in_graph(module: torch.nn.Module) -> None:
    """From now on the graph reads the module's size results itself: it returns its tensors
    only."""
    sizes = size_outputs(module)
    if sizes:
        module.n_graph_outputs -= len(sizes)
        module.size_outputs = ()


@dataclass(frozen=True)
class OwnCall:
    """An engine called through this package's own op (`tte::execute_engine`), as the legacy
    exporter inlines it: `op(inputs, program, weights, signature)`, each symbolic scalar input
    (`scalars`: position -> dtype) bound as a 0-d tensor."""

    op: object
    program: torch.Tensor
    weights: tuple[torch.Tensor, ...]
    scalars: dict[int, torch.dtype]
    signature: str


def own_call(module: torch.nn.Module) -> OwnCall | None:
    """How the legacy exporter inlines a reference engine (its own op, its payload); None for a
    TensorRT engine, inlined as torch-tensorrt's engine call."""
    if kind(module) != "reference":
        return None
    from .execute_op import OP
    return OwnCall(OP, module.program, tuple(module.weights), dict(module.scalars),
                   module.signature)
