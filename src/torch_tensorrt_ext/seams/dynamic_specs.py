"""Patch 0007's hand-over: `torch_tensorrt.Input` specs on the ahead-of-time save paths.

Invariant: the names the patch calls, defined in `export/dynamic_specs.py`; no logic here.
"""
from __future__ import annotations

from ..export.dynamic_specs import export_args, unify_shared_dims

__all__ = ["export_args", "unify_shared_dims"]
