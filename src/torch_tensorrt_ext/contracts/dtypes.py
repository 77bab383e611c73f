"""Binding dtypes: the one table of the package — the blob's dtype names, their element sizes
and the torch dtypes they are (docs/CONTRACTS.md §1).

Invariant: `_TABLE` is the only dtype table of the package (runtime/src/dtype.cpp holds the same
names, sizes and ScalarType codes for the C++ runtime; tests/contracts/test_dtypes.py compares
them);
every other map here is derived from it. `SCALAR_TYPES` (what a `.pte`'s state may hold, for
reading programs) is `_TABLE` plus the one dtype no engine binding takes, int16. A blob dtype
name is torch's own attribute name
(`torch.float32`, `torch.bool`, ...), so `TORCH_DTYPES` and `DTYPE_NAMES` are exact inverses and
cover exactly the blob's names.
"""
from __future__ import annotations


import torch

from .blob_checks import BlobError

__all__ = ["DTYPES", "TORCH_DTYPES", "DTYPE_NAMES", "SCALAR_TYPE_NAMES", "SCALAR_TYPES",
           "dtype_name", "torch_dtype"]

# dtype name -> (element size in bytes, ExecuTorch/c10 ScalarType code), as runtime/src/dtype.cpp
_TABLE: dict[str, tuple[int, int]] = {
    "float32": (4, 6), "float16": (2, 5), "bfloat16": (2, 15), "int64": (8, 4), "int32": (4, 3),
    "int8": (1, 1), "uint8": (1, 0), "bool": (1, 11), "float64": (8, 7),
}
DTYPES: dict[str, int] = {name: size for name, (size, _) in _TABLE.items()}
SCALAR_TYPE_NAMES: dict[int, str] = {code: name for name, (_, code) in _TABLE.items()}
TORCH_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPES}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}
# ScalarType code -> (name, element size) of a program's tensors: the bindings' dtypes and int16
SCALAR_TYPES: dict[int, tuple[str, int]] = {
    **{code: (name, size) for name, (size, code) in _TABLE.items()}, 2: ("int16", 2)}


def dtype_name(dtype: torch.dtype) -> str:
    """The binding dtype name of a torch dtype; `BlobError` naming the supported ones if none."""
    if dtype not in DTYPE_NAMES:
        raise BlobError(f"dtype {dtype} has no engine binding type; supported: "
                        f"{sorted(TORCH_DTYPES)}", check="binding.unknown_dtype")
    return DTYPE_NAMES[dtype]


def torch_dtype(name: str) -> torch.dtype:
    return TORCH_DTYPES[name]
