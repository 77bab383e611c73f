"""Arithmetic on strided views: how many bytes a view needs, and how a copy compacts it.

Invariant: these functions are pure functions of ``(sizes, strides, storage_offset, element
size)``; they never touch tensor data. ``view_end_nbytes`` is the exact number of leading
storage bytes a view reads (0 for a view with no elements), and ``compacted_strides`` is exactly
the stride tuple PyTorch gives a layout-preserving copy (``.cpu()``, ``.clone()``, ``.to()``) of
such a view.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..errors import TteError

__all__ = [
    "ViewMetadataError",
    "check_view_metadata",
    "compacted_strides",
    "is_non_overlapping",
    "view_end_nbytes",
]


class ViewMetadataError(TteError, ValueError):
    """The sizes/strides/offset recorded for a view cannot describe any tensor."""


def check_view_metadata(sizes: Sequence[int], strides: Sequence[int], storage_offset: int) -> None:
    """Raise ``ViewMetadataError`` saying what is wrong, unless the metadata can describe a view."""
    if len(sizes) != len(strides):
        raise ViewMetadataError(
            f"sizes {tuple(sizes)} have rank {len(sizes)} but strides {tuple(strides)} "
            f"have rank {len(strides)}"
        )
    if storage_offset < 0:
        raise ViewMetadataError(f"storage offset {storage_offset} is negative")
    if any(size < 0 for size in sizes):
        raise ViewMetadataError(f"sizes {tuple(sizes)} contain a negative size")
    if any(stride < 0 for stride in strides):
        raise ViewMetadataError(f"strides {tuple(strides)} contain a negative stride")


def view_end_nbytes(
    sizes: Sequence[int], strides: Sequence[int], storage_offset: int, element_size: int
) -> int:
    """Bytes from the start of the storage to the end of the view's last element."""
    if any(size == 0 for size in sizes):
        return 0
    last_element = storage_offset + sum(
        (size - 1) * stride for size, stride in zip(sizes, strides, strict=False)
    )
    return (last_element + 1) * element_size


def is_non_overlapping(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """True if no two elements of the view share a storage location (a sufficient test).

    Dimensions of size <= 1 never overlap; the others, in increasing stride, must each step past
    everything the smaller ones span. Views that fail it (a stride-0 broadcast) are treated as
    overlapping.
    """
    reach = 0
    for size, stride in sorted(
        ((size, stride) for size, stride in zip(sizes, strides, strict=True) if size > 1),
        key=lambda d: d[1]):
        if stride <= reach:
            return False
        reach += (size - 1) * stride
    return True


def compacted_strides(sizes: Sequence[int], strides: Sequence[int]) -> tuple[int, ...]:
    """Strides of a layout-preserving copy of a view with these sizes and strides.

    A copy with ``memory_format=torch.preserve_format`` keeps the strides of a dense view and
    gives a view with gaps dense strides in the same dimension order (``(10, 1)`` on ``(6, 8)``
    becomes ``(8, 1)``). Asked of the meta device, so nothing is allocated.
    """
    view = torch.empty_strided(tuple(sizes), tuple(strides), device="meta")
    return tuple(torch.empty_like(view, memory_format=torch.preserve_format).stride())
