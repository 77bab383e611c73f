"""The CUDA weight-collector logic that ExecuTorch's ``backends/cuda`` calls through our patch.

Invariant: this package decides, per AOTInductor weight and before any byte is written, what the
CUDA weight manifest records and which bytes are written; it depends on torch only, never on
executorch, so the patched collector can import it without an import cycle.
"""
from .views import (
    ViewMetadataError,
    check_view_metadata,
    compacted_strides,
    is_non_overlapping,
    view_end_nbytes,
)
from .weights import (
    CudaWeightLayoutError,
    LayoutSource,
    WeightLayout,
    value_to_write,
    weight_layout,
)

__all__ = [
    "CudaWeightLayoutError",
    "LayoutSource",
    "ViewMetadataError",
    "WeightLayout",
    "check_view_metadata",
    "compacted_strides",
    "is_non_overlapping",
    "value_to_write",
    "view_end_nbytes",
    "weight_layout",
]
