"""torch-tensorrt-ext: stateful models through Torch-TensorRT into ExecuTorch.

Invariant: this module re-exports the public API named in docs/ARCHITECTURE.md ("Public API")
and nothing else.
"""
from .contracts.engine import AliasedIO, EngineInfo
from .contracts.plan import (BufferWrite, Copier, MutationPlan, PlanError, RebuildRequest,
                             WriteKind)
from .lowering import LiftedGraph, lift_mutated_buffers, plan_mutations, reconcile

_SUBMODULES = ("reference", "executorch", "cuda", "export", "engines", "runtime_lib")


def __getattr__(name):  # `tte.reference`, `tte.executorch`, ... imported on first use
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AliasedIO", "BufferWrite", "Copier", "EngineInfo", "LiftedGraph", "MutationPlan", "PlanError",
    "RebuildRequest", "WriteKind", "lift_mutated_buffers", "plan_mutations", "reconcile",
    "declare_mutations", *_SUBMODULES,
]


def declare_mutations(*args, **kwargs):
    """See `torch_tensorrt_ext.export.declare_mutations`."""
    from .export.declare import declare_mutations as declare
    return declare(*args, **kwargs)
