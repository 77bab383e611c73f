"""The compile stage's hand-overs: the names patches 0002 (`torch_tensorrt.dynamo.compile`: the
program it lowers, then plan → lift → build → reconcile → module state), 0009 (an aliased output
a partition returns), 0011 (a partition whose only effect is an aliased cache write) and 0013
(integer and view results no engine returns) call.

Invariant: each name is defined in `compiling/`; this module holds no logic of its own, so the
patches' calls and the package's own tests run the same code.
"""
from __future__ import annotations

from ..compiling.host_results import host_results
from ..compiling.partition_outputs import aliased_outputs_returned
from ..compiling.stateful_compile import StatefulCompile, stateful_program
from ..compiling.write_only_partitions import write_only_partitions_to_torch

__all__ = ["StatefulCompile", "aliased_outputs_returned", "host_results", "stateful_program",
           "write_only_partitions_to_torch"]
