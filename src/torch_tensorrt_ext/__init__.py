"""torch-tensorrt-ext: stateful models through Torch-TensorRT into ExecuTorch.

Invariant: this module re-exports the public API named in DESIGN.md and nothing else.
"""
from .engines.info import AliasedIO, EngineInfo
from .lowering import LiftedGraph, lift_mutated_buffers, plan_mutations, reconcile
from .plan import BufferWrite, MutationPlan, PlanError, RebuildRequest, WriteKind

__all__ = [
    "AliasedIO", "BufferWrite", "EngineInfo", "LiftedGraph", "MutationPlan", "PlanError",
    "RebuildRequest", "WriteKind", "lift_mutated_buffers", "plan_mutations", "reconcile",
]
