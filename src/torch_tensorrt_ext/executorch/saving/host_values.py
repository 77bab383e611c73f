"""What the emitted program serializes is read on the host from host memory only.

ExecuTorch's emitter serializes every constant and every initial value of a mutable buffer by
dereferencing the tensor storage's data pointer on the host (`ctypes`). For a model exported on
a GPU the state dict holds CUDA tensors: that is host code reading a device pointer — a segfault
on a GPU runner, not an error (upstream's own save warns as much). A tensor with no storage at all
(the `meta` device: a model built without materialising its weights) dereferences a null pointer.

Invariant: `host_values(programs)` returns programs whose state-dict and constant tensors are all
in host memory: each tensor elsewhere is replaced by a host copy made through its device's own
copy (`Tensor.cpu()`; a parameter stays a parameter); a tensor that has no value to copy (`meta`)
is refused with `PlanError` naming its FQN. Programs already in
host memory are returned as they are.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch.export import ExportedProgram

from ...contracts.plan import PlanError
from ...lowering.program_edit import rebuilt

__all__ = ["host_values"]

Programs = ExportedProgram | Mapping[str, ExportedProgram]


def _host(fqn: str, t):
    if not isinstance(t, torch.Tensor) or t.device.type == "cpu":
        return t
    if t.device.type == "meta":
        raise PlanError(f"{fqn!r} is a meta tensor: it has no value to write into the .pte; "
                        "materialise the model's weights and buffers (load a checkpoint, or "
                        "to_empty() and initialise them) before exporting")
    host = t.detach().cpu()           # the device's own copy (for CUDA: a device-to-host copy)
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(host, requires_grad=t.requires_grad)
    return host


def _one(ep: ExportedProgram) -> ExportedProgram:
    values = {**ep.state_dict, **ep.constants}
    if all(not isinstance(t, torch.Tensor) or t.device.type == "cpu" for t in values.values()):
        return ep
    state = {k: _host(k, v) for k, v in ep.state_dict.items()}
    constants = {k: _host(k, v) for k, v in ep.constants.items()}
    return rebuilt(ep, state_dict=state, constants=constants)


def host_values(programs: Programs) -> Programs:
    """`programs` (one, or `{method: program}`) with every value the emitter reads in host
    memory (module docstring)."""
    if isinstance(programs, Mapping):
        return {name: _one(p) for name, p in programs.items()}
    return _one(programs)
