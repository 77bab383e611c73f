"""The bytes of a tensor as a binding, a blob or named data holds them: row-major, whatever the
tensor's layout.

Invariant: `tensor_bytes(t)` is the `numel * element size` bytes of `t`'s values in row-major
order, for every layout — size-1 dimensions with any stride (which `.contiguous()` keeps, and
which `view(torch.uint8)` refuses: "self.stride(-1) must be 1"), transposed and sliced views,
expanded (stride 0) tensors, 0-d and empty tensors — and every dtype a binding takes. It is a
view of `t`'s own memory (not copied; valid while `t` lives) where the values already lie
row-major and densely there, else of a row-major copy. Equal values of one dtype and shape give
equal bytes whatever their layouts; the bytes are host bytes (`t` is brought to the host first).
"""
from __future__ import annotations

import torch

__all__ = ["tensor_bytes"]


def tensor_bytes(t: torch.Tensor) -> memoryview:
    flat = t.detach().cpu().reshape(-1)   # a view where the layout allows one, else a copy
    if flat.numel() <= 1:
        # one element (or none) at any stride: the same memory, stride 1
        flat = flat.as_strided((flat.numel(),), (1,))
    elif flat.stride(0) != 1:
        flat = flat.clone(memory_format=torch.contiguous_format)
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")
