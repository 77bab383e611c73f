"""The mutation passes: find → classify → lift → reconcile.

Invariant: the passes communicate only through `MutationPlan` and the returned objects — never
through string keys in `gm.meta`.
"""
from .classify import plan_mutations
from .lift import LiftedGraph, lift_mutated_buffers
from .reconcile import reconcile

__all__ = ["LiftedGraph", "lift_mutated_buffers", "plan_mutations", "reconcile"]
