"""Lower declared programs to a `.pte` through torch-tensorrt's ExecuTorch path (the one
`torch_tensorrt.save(output_format="executorch")` runs, patched): engines delegated, state kept
above them and initialised.

Invariant: every mutable buffer of the emitted program carries its registered initial value (so
the first call starts from it, KV and copy-back alike) and its fully qualified name (so traffic
can be attributed per buffer); a buffer one method writes and another uses shares one
allocation (or, `share_mutable_buffers`, always / never). `save_pte` never leaves a partly
written `.pte` at its destination. There is no second lowering pipeline: this module only
chooses the config.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from collections.abc import Mapping

import torch
from executorch.exir import ExecutorchBackendConfig

from ...upstream_api import torch_tensorrt_module
from . import backend  # noqa: F401  (registers TensorRTBackend for to_backend)
from .partition import reference_device
from .pte_write import write_atomic

Programs = torch.export.ExportedProgram | Mapping[str, torch.export.ExportedProgram]


def to_executorch(programs: Programs, *, device: str | None = None,
                  share_mutable_buffers: bool | None = None):
    """`ExecutorchProgramManager` for one declared program or a `{method: program}` mapping.
    `device`: where reference delegates (and so the state they read) live — by default the
    host, or $TTE_REFERENCE_DEVICE (`partition.reference_device`)."""
    import torch_tensorrt.executorch  # noqa: F401  (the patched upstream lowering)

    torch_tensorrt = torch_tensorrt_module()
    with reference_device(device) if device is not None else contextlib.nullcontext():
        edge = torch_tensorrt.executorch.export(programs)
    return edge.to_executorch(ExecutorchBackendConfig(),
                              share_across_methods=share_mutable_buffers)


def save_pte(programs: Programs, path: str, **kw) -> str:
    """Lower `programs` and write the `.pte` to `path` all or nothing (`pte_write`): a failure
    while writing (a full disk, an error in serialisation) leaves `path` as it was."""
    et = to_executorch(programs, **kw)
    write_atomic(path, et.write_to_file)
    for name, cord in (et._tensor_data or {}).items():   # save_data_externally: <name>.ptd
        write_atomic(Path(path).parent / f"{name}.ptd", cord.write_to_file)
    return path
