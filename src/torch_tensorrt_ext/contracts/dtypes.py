"""Binding dtypes: the blob's dtype names, their element sizes and the torch dtypes they are.

Invariant: one table (`blob_model.DTYPES`, the same names and sizes as runtime/src/dtype.cpp);
a blob dtype name is torch's own attribute name (`torch.float32`, `torch.bool`, ...), so the two
maps here are exact inverses and cover exactly the blob's names.
"""
from __future__ import annotations

from typing import Dict

import torch

from .blob_model import DTYPES, BlobError

__all__ = ["DTYPES", "TORCH_DTYPES", "DTYPE_NAMES", "dtype_name", "torch_dtype"]

TORCH_DTYPES: Dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPES}
DTYPE_NAMES: Dict[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    """The binding dtype name of a torch dtype; `BlobError` naming the supported ones if none."""
    if dtype not in DTYPE_NAMES:
        raise BlobError(f"dtype {dtype} has no engine binding type; supported: "
                        f"{sorted(TORCH_DTYPES)}")
    return DTYPE_NAMES[dtype]


def torch_dtype(name: str) -> torch.dtype:
    return TORCH_DTYPES[name]
