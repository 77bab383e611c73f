"""Register a tensor as a buffer of a module under a nested fully qualified name.

Invariant: after `set_buffer(root, "a.b.c", t)`, `root.get_buffer("a.b.c") is t` and
`root.state_dict()` has key "a.b.c" — missing intermediate modules are created as empty
`nn.Module`s, so FQNs survive compilation unchanged (no flattening or renaming).
"""
from __future__ import annotations

import torch


def set_buffer(root: torch.nn.Module, fqn: str, tensor: torch.Tensor) -> None:
    *path, name = fqn.split(".")
    mod = root
    for p in path:
        if not hasattr(mod, p):
            mod.add_module(p, torch.nn.Module())
        mod = getattr(mod, p)
    if name in mod._buffers:
        mod._buffers[name] = tensor
    else:
        mod.register_buffer(name, tensor)
