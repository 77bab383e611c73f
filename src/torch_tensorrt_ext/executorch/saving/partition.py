"""What ExecuTorch's partitioner hands each TensorRTBackend delegate beyond the partition:
the mutable buffers its engine reads and, for reference engines, the delegate's device.

Invariant: a TensorRT partition's delegation spec carries `tte_buffers` (input binding -> FQN of
each mutable buffer the engine reads), which only the whole program can name; each reference
engine call is tagged as a partition of its own with its getitems, its payload program and its
weights (each a constant of its own, else refused), while state buffers are never tagged — state
stays above the delegate.
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import operator
import os

import torch
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec
from torch.export import ExportedProgram

from ...contracts.engine_call import ENGINE_ARG, WEIGHTS_ARG, is_reference_call, is_tensorrt_call
from ...contracts.plan import PlanError
from ...errors import UsageError
from .backend import BACKEND_ID
from ...export.engine_calls import engine_info
from .tensorrt_blob import BUFFERS_SPEC, DEVICE_SPEC, EXTERNAL_DATA_SPEC

__all__ = ["buffer_specs", "reference_device", "save_data_externally", "BUFFERS_SPEC",
           "DEVICE_SPEC"]

# Where reference delegates (and the state they write) live unless `reference_device` says:
# $TTE_REFERENCE_DEVICE ("cuda:0" puts their state in device arenas; the tests' emulated-device
# mode sets it), else the host.
_DEFAULT_DEVICE: str = os.environ.get("TTE_REFERENCE_DEVICE", "cpu")
_REFERENCE_DEVICE = contextvars.ContextVar("tte_reference_device", default=_DEFAULT_DEVICE)


@contextlib.contextmanager
def reference_device(device: str):
    """Inside, reference engine delegates are lowered for `device` (CPU by default)."""
    token = _REFERENCE_DEVICE.set(device)
    try:
        yield
    finally:
        _REFERENCE_DEVICE.reset(token)


# `save_data_externally(name)`: engine weights go to `<name>.ptd` beside the `.pte`
_EXTERNAL_DATA = contextvars.ContextVar("tte_external_data", default=None)


@contextlib.contextmanager
def save_data_externally(name: str = "model"):
    """Inside, a save puts its engines' weights (ExecuTorch named data) in the external data file
    `<name>.ptd` written beside the `.pte` — ExecuTorch's `save_data_externally` — instead of
    in the `.pte`; load it with `load(pte, data_files=ptd)` or `tte_run --data`."""
    if not name or "/" in name or name.startswith("."):
        raise UsageError(f"save_data_externally({name!r}): the data file's name is a plain file "
                         "stem such as 'model' (written as model.ptd beside the .pte)")
    token = _EXTERNAL_DATA.set(name)
    try:
        yield
    finally:
        _EXTERNAL_DATA.reset(token)


def _tagged_engine(ep: ExportedProgram, tag: str) -> torch.fx.Node | None:
    calls = [n for n in ep.graph_module.graph.nodes if is_tensorrt_call(n)
             and n.meta.get("delegation_tag") == tag]
    return calls[0] if len(calls) == 1 else None


def buffer_specs(ep: ExportedProgram, tags: dict[str, DelegationSpec]) -> dict[str, DelegationSpec]:
    """Each TensorRT partition's delegation spec plus the mutable buffers its engine reads
    (input binding -> FQN), which only the whole program can name; reference engine calls
    (`tte::execute_engine`) get delegates of their own (CPU: no target device)."""
    tags = {**tags, **_tag_reference_engines(ep)}
    sig = ep.graph_signature
    _state_above_delegates(ep)
    mutated = set(sig.buffers_to_mutate.values())
    buffers = {n: f for n, f in sig.inputs_to_buffers.items() if f in mutated}
    out = {}
    for tag, spec in tags.items():
        node = _tagged_engine(ep, tag)
        if node is None:
            out[tag] = spec
            continue
        info = engine_info(ep, node)
        pairs = [[info.input_names[i], buffers[a.name]] for i, a in enumerate(node.args[0])
                 if getattr(a, "name", None) in buffers]
        specs = [s for s in spec.compile_specs if s.key != BUFFERS_SPEC]
        specs.append(CompileSpec(BUFFERS_SPEC, json.dumps(pairs).encode()))
        out[tag] = DelegationSpec(spec.backend_id, specs)
    return {tag: _with_external_data(spec) for tag, spec in out.items()}


def _state_above_delegates(ep: ExportedProgram) -> None:
    """Every buffer stays above the delegates, read-only ones too: an engine reads a buffer live
    (another method may write it), as an argument of its delegate — never as a constant the
    partitioner moved into the delegate (TensorRT's tags the constants only its partition
    reads, which left the engine's input binding of such a buffer without an argument)."""
    buffers = set(ep.graph_signature.inputs_to_buffers)
    for call in ep.graph_module.graph.nodes:
        if not (is_tensorrt_call(call) or is_reference_call(call)):
            continue
        for arg in call.args[0]:     # the engine's inputs (not its payload)
            if getattr(arg, "op", None) == "placeholder" and arg.name in buffers:
                arg.meta.pop("delegation_tag", None)


def _with_external_data(spec: DelegationSpec) -> DelegationSpec:
    """This backend's delegates name the external data file, inside `save_data_externally`."""
    name = _EXTERNAL_DATA.get()
    if name is None or spec.backend_id != BACKEND_ID:
        return spec
    specs = [s for s in spec.compile_specs if s.key != EXTERNAL_DATA_SPEC]
    return DelegationSpec(spec.backend_id, specs + [CompileSpec(EXTERNAL_DATA_SPEC,
                                                                name.encode())])


def _tag_reference_engines(ep: ExportedProgram) -> dict[str, DelegationSpec]:
    """Tag each reference engine call with its getitems, payload and weights, like TensorRT's
    partitions; state stays above the delegate (state buffers are never tagged)."""
    tags: dict[str, DelegationSpec] = {}
    calls = [n for n in ep.graph_module.graph.nodes if is_reference_call(n)]
    if not calls:
        return tags
    sig = ep.graph_signature
    device = _REFERENCE_DEVICE.get()
    # the target device only for accelerators: on CPU ExecuTorch would stage every argument
    specs = [] if device == "cpu" else [CompileSpec(DEVICE_SPEC, device.encode())]
    lifted = set(sig.inputs_to_lifted_tensor_constants) | set(sig.inputs_to_buffers)
    for i, node in enumerate(calls):
        tag = f"tte_reference_{i}"
        tags[tag] = DelegationSpec(BACKEND_ID, list(specs))
        node.meta["delegation_tag"] = tag
        for user in node.users:
            if user.target is operator.getitem:
                user.meta["delegation_tag"] = tag
        for const in (node.args[ENGINE_ARG], *node.args[WEIGHTS_ARG]):
            if const.op != "placeholder" or const.name not in lifted or len(const.users) != 1:
                raise PlanError(f"reference engine call {node.name!r}: its payload or weight "
                                f"{const.name!r} is not a constant of its own")
            const.meta["delegation_tag"] = tag
    return tags
