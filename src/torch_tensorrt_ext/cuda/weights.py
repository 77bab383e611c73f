"""How ExecuTorch's CUDA weight collector reads each AOTInductor weight back out of its bytes.

For every constant, AOTInductor hands the collector a pair: the *value* whose untyped storage is
written to the ``.ptd`` file, and the ``TensorProperties`` of the constant the kernels were
compiled against. The two are not the same tensor for a lifted buffer: AOTInductor writes a
*compact clone* of it (its own storage, holding exactly the view's span) while the properties
still describe the original view (its storage size, its offset). ``weight_layout`` decides, per
weight and before anything is written, which sizes/strides/offset/storage size the manifest
records:

* **compact clone** -- the value has its own storage (not the one the properties describe) and
  the described shape and strides: the manifest describes the value (its offset, its storage
  size); the described storage size and offset belong to the original and are ignored.
* **compacted clone** -- the same, but the clone was copied to the host with a layout-preserving
  ``.cpu()`` (ExecuTorch's low-memory mode), which closes the gaps of a strided view
  (``(6, 8)`` with strides ``(10, 1)``, 232 bytes, becomes strides ``(8, 1)``, 192 bytes). The
  kernels were compiled for the described strides and read a constant through them, so the
  value is written back out in the described layout (offset 0, the clone's 232-byte span, gaps
  zero) and the manifest describes exactly those bytes.
* **described view** -- anything else (a parameter, which is its own constant; a value sharing
  the described storage, such as a slice of a fused tensor; a value with the same shape but
  other strides): the properties describe a view into the value's storage, as before.

Invariant: the bytes ``value_to_write`` returns, read through the returned layout, reproduce the
weight exactly, with the strides the kernels were compiled for; every layout (clone or not)
reads only bytes inside the storage written, and a clone spans its own storage exactly. Anything
else raises ``CudaWeightLayoutError`` naming the weight's FQN and what is wrong. A value is taken
for a clone only when it has its own storage and the described shape, i.e. when the value itself
is the weight's content whatever the described offset says; every other weight keeps executorch
1.5.1's reading and checks.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import TteError
from .views import (
    ViewMetadataError,
    check_view_metadata,
    compacted_strides,
    is_non_overlapping,
    view_end_nbytes,
)

__all__ = [
    "CudaWeightLayoutError",
    "LayoutSource",
    "WeightLayout",
    "value_to_write",
    "weight_layout",
]


class CudaWeightLayoutError(TteError, RuntimeError):
    """A weight's value cannot be read back as the view its TensorProperties describe."""


class LayoutSource(enum.Enum):
    """Which reading of the value the manifest records (see the module docstring)."""

    DESCRIBED_VIEW = "described view"
    COMPACT_CLONE = "compact clone"
    COMPACTED_CLONE = "compacted clone"


@dataclass(frozen=True)
class WeightLayout:
    """What the manifest records for one weight, next to the value's written storage."""

    source: LayoutSource
    storage_nbytes: int
    storage_offset: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]


def weight_layout(fqn: str, tensor: torch.Tensor, properties: Any) -> WeightLayout:
    """Decide and validate the manifest entry of weight ``fqn`` before its storage is written.

    ``properties`` is AOTInductor's ``TensorProperties`` for the constant, or ``None`` (then the
    value describes itself).
    """
    sizes, strides, offset = _described_metadata(tensor, properties)
    try:
        check_view_metadata(sizes, strides, offset)
    except ViewMetadataError as error:
        raise CudaWeightLayoutError(
            f"CUDA weight {fqn!r} has invalid tensor metadata: {error}; its TensorProperties "
            "must describe a real view (sizes and strides of equal rank, nothing negative)"
        ) from None

    storage = tensor.untyped_storage()
    storage_nbytes = storage.nbytes()
    source = _clone_kind(tensor, storage.data_ptr(), properties, sizes, strides)
    del storage
    element_size = tensor.element_size()

    if source is LayoutSource.DESCRIBED_VIEW:
        _check_described_storage_size(fqn, storage_nbytes, properties)
        _check_inside(fqn, sizes, strides, offset, element_size, storage_nbytes)
        return WeightLayout(source, storage_nbytes, offset, sizes, strides)

    value_strides, value_offset = tuple(tensor.stride()), int(tensor.storage_offset())
    end = _check_inside(fqn, sizes, value_strides, value_offset, element_size, storage_nbytes)
    if end != storage_nbytes:
        raise CudaWeightLayoutError(
            f"CUDA weight {fqn!r}: its compact clone has {storage_nbytes - end} bytes past its "
            f"view (the view ends at byte {end} of a {storage_nbytes}-byte storage); "
            "AOTInductor's clone of a view spans its storage exactly, so this value is not one"
        )
    if source is LayoutSource.COMPACT_CLONE:
        return WeightLayout(source, storage_nbytes, value_offset, sizes, value_strides)
    return WeightLayout(source, view_end_nbytes(sizes, strides, 0, element_size), 0, sizes, strides)


def value_to_write(tensor: torch.Tensor, layout: WeightLayout) -> torch.Tensor:
    """The tensor whose untyped storage holds exactly the bytes ``layout`` describes.

    The value itself, except for a compacted clone: that is copied into a zeroed storage of
    ``layout.storage_nbytes`` bytes in the described strides (one weight's span, transient).
    """
    if layout.source is not LayoutSource.COMPACTED_CLONE:
        return tensor
    element_size = tensor.element_size()
    storage = torch.zeros(
        layout.storage_nbytes // element_size, dtype=tensor.dtype, device=tensor.device
    )
    restrided = storage.as_strided(layout.sizes, layout.strides, layout.storage_offset)
    restrided.copy_(tensor)
    return restrided


def _check_inside(
    fqn: str,
    sizes: tuple[int, ...],
    strides: tuple[int, ...],
    offset: int,
    element_size: int,
    storage_nbytes: int,
) -> int:
    """The view's end in bytes; it must lie inside the storage that is written."""
    end = view_end_nbytes(sizes, strides, offset, element_size)
    if end > storage_nbytes:
        raise CudaWeightLayoutError(
            f"CUDA weight {fqn!r}: its view (sizes {sizes}, strides {strides}, "
            f"storage offset {offset}) requires {end} bytes from a "
            f"{storage_nbytes}-byte cloned storage; the value AOTInductor returned does not "
            "hold every byte of the view"
        )
    return end


def _described_metadata(
    tensor: torch.Tensor, properties: Any
) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """Sizes, strides and offset the properties describe; the value's own where they are silent."""
    sizes = tuple(int(size) for size in getattr(properties, "shape", tensor.shape))
    strides = tuple(int(stride) for stride in getattr(properties, "stride", tensor.stride()))
    offset = int(getattr(properties, "offset", tensor.storage_offset()))
    return sizes, strides, offset


def _clone_kind(
    tensor: torch.Tensor,
    storage_ptr: int,
    properties: Any,
    sizes: tuple[int, ...],
    strides: tuple[int, ...],
) -> LayoutSource:
    """Whether the value is AOTInductor's clone of the described view, and of which kind."""
    described_storage = getattr(properties, "storage_ptr", None)
    if described_storage is None or described_storage == storage_ptr:
        return LayoutSource.DESCRIBED_VIEW
    if tuple(tensor.shape) != sizes:
        return LayoutSource.DESCRIBED_VIEW
    value_strides = tuple(tensor.stride())
    if value_strides == strides:
        return LayoutSource.COMPACT_CLONE
    if is_non_overlapping(sizes, strides) and value_strides == compacted_strides(sizes, strides):
        return LayoutSource.COMPACTED_CLONE
    return LayoutSource.DESCRIBED_VIEW


def _check_described_storage_size(fqn: str, storage_nbytes: int, properties: Any) -> None:
    """A value read through the described view must hold at least the described storage."""
    expected = int(getattr(properties, "storage_size", None) or 0)
    if storage_nbytes < expected:
        raise CudaWeightLayoutError(
            f"CUDA weight {fqn!r}: AOTI cloned storage is smaller than its TensorProperties "
            f"({storage_nbytes} < {expected} bytes); the value AOTInductor returned does not "
            "hold the storage its TensorProperties describe"
        )
