"""Patch 0004's entry points into this package's ExecuTorch integration (torch-tensorrt's
`executorch` partitioner, `TensorRTBackend.preprocess` and the partition copy it is handed, and
`export`, where it prepares the programs before lowering).

Invariant: each name here is a function the patch calls, defined in `executorch/saving/`; this
module holds no logic of its own, so the patch's calls and the package's own lowering run the
same code.
"""
from __future__ import annotations

from ..executorch.saving.backend import TensorRTBackend, program_for_preprocess
from ..executorch.saving.config import stateful_edge
from ..executorch.saving.prepare import prepare_programs
from ..executorch.saving.partition import buffer_specs

__all__ = ["buffer_specs", "prepare_programs", "preprocess", "program_for_preprocess",
           "stateful_edge"]

preprocess = TensorRTBackend.preprocess
