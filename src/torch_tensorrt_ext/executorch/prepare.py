"""The declared programs as ExecuTorch's lowering receives them (patch 0004 calls this first).

Invariant: what `prepare_programs` returns has every value the emitter reads in host memory
(`host_values`) and every copy-back write a TensorRT delegate can copy itself handed to that
delegate (`delegate_copies`); a program needing neither is returned as it is.
"""
from __future__ import annotations

from .delegate_copies import Programs, hand_copy_backs_to_delegates
from .host_values import host_values

__all__ = ["prepare_programs"]


def prepare_programs(programs: Programs) -> Programs:
    return hand_copy_backs_to_delegates(host_values(programs))
