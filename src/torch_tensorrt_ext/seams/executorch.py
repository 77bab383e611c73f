"""torch-tensorrt's ExecuTorch path (`TensorRTPartitioner`, `TensorRTBackend.preprocess`,
`_save_as_executorch`) producing this project's delegate: TR03 blob, state above the delegate.

Invariant: every TensorRT delegate's blob is TR03 (docs/CONTRACTS.md §1) naming, for each
mutable buffer its engine reads, the input binding and the buffer's FQN, and the engine's own
aliased I/O; the engine bytes are the serialized engine, untouched. Mutable buffers stay above
the delegate (caller-owned), are serialized with their initial values, keep their FQNs in the
program, and are never staged host→device per call for a device delegate.
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import operator
from typing import Dict, List, Optional, Set

import torch
from executorch.exir.backend.backend_details import PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind

from ..engines.tensorrt_info import engine_info_from_serialized
from ..executorch import blob as blobfmt
from ..export.engine_calls import is_engine_call, is_reference_call

BUFFERS_SPEC = "tte_buffers"
DEVICE_SPEC = "target_device"
_REFERENCE_DEVICE = contextvars.ContextVar("tte_reference_device", default="cpu")


@contextlib.contextmanager
def reference_device(device: str):
    """Inside, reference engine delegates are lowered for `device` (CPU by default)."""
    token = _REFERENCE_DEVICE.set(device)
    try:
        yield
    finally:
        _REFERENCE_DEVICE.reset(token)


def _tagged_engine(ep: ExportedProgram, tag: str) -> Optional[torch.fx.Node]:
    calls = [n for n in ep.graph.nodes if is_engine_call(n) and not is_reference_call(n)
             and n.meta.get("delegation_tag") == tag]
    return calls[0] if len(calls) == 1 else None


def _engine_info(ep: ExportedProgram, node: torch.fx.Node, metadata_only: bool = True) -> list:
    from torch_tensorrt.executorch.backend import _get_engine_info_for_node
    return list(_get_engine_info_for_node(ep, node, metadata_only=metadata_only))


def buffer_specs(ep: ExportedProgram, tags: Dict[str, DelegationSpec]) -> Dict[str, DelegationSpec]:
    """Each TensorRT partition's delegation spec plus the mutable buffers its engine reads
    (input binding -> FQN), which only the whole program can name; reference engine calls
    (`tte::execute_engine`) get delegates of their own (CPU: no target device)."""
    tags = {**tags, **_tag_reference_engines(ep)}
    sig = ep.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    buffers = {n: f for n, f in sig.inputs_to_buffers.items() if f in mutated}
    out = {}
    for tag, spec in tags.items():
        node = _tagged_engine(ep, tag)
        if node is None:
            out[tag] = spec
            continue
        info = engine_info_from_serialized(_engine_info(ep, node))
        pairs = [[info.input_names[i], buffers[a.name]] for i, a in enumerate(node.args[0])
                 if getattr(a, "name", None) in buffers]
        specs = [s for s in spec.compile_specs if s.key != BUFFERS_SPEC]
        specs.append(CompileSpec(BUFFERS_SPEC, json.dumps(pairs).encode()))
        out[tag] = DelegationSpec(spec.backend_id, specs)
    return out


def _tag_reference_engines(ep: ExportedProgram) -> Dict[str, DelegationSpec]:
    """Tag each reference engine call with its getitems and payload, like TensorRT's partitions;
    state stays above the delegate (buffers are never tagged)."""
    from ..executorch.backend import BACKEND_ID
    sig = ep.graph_signature
    tags: Dict[str, DelegationSpec] = {}
    calls = [n for n in ep.graph.nodes if is_reference_call(n)]
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
        payload = node.args[1]
        if payload.op != "placeholder" or payload.name not in lifted or len(payload.users) != 1:
            raise blobfmt.BlobError(f"reference engine call {node.name!r}: its payload "
                                    f"{payload.name!r} is not a constant of its own")
        payload.meta["delegation_tag"] = tag
    return tags


def _bindings(info) -> tuple:
    """Every binding with the dtype and shape the engine's metadata records (TR03 needs both)."""
    if len(info.input_dtypes) != len(info.input_names) or \
            len(info.output_dtypes) != len(info.output_names):
        raise blobfmt.BlobError(f"engine {info.name!r}: its metadata records no binding types "
                                "(no inout_symexprs); recompile it with torch-tensorrt 2.14.0")
    ins = [blobfmt.IOBinding(n, info.input_dtypes[i], tuple(info.input_shapes[i]), True)
           for i, n in enumerate(info.input_names)]
    outs = [blobfmt.IOBinding(n, info.output_dtypes[i], tuple(info.output_shapes[i]), False)
            for i, n in enumerate(info.output_names)]
    return tuple(ins + outs)


def preprocess(edge_program: ExportedProgram, compile_specs: List[CompileSpec]) -> PreprocessResult:
    """One TensorRT partition → one TR03 blob carrying the serialized engine (a reference
    engine's partition: this project's reference blob)."""
    if any(is_reference_call(n) for n in edge_program.graph.nodes):
        from ..executorch.backend import TensorRTBackend
        return TensorRTBackend.preprocess(edge_program, compile_specs)
    from ..executorch.backend import delegate_input_bindings, delegate_output_bindings
    from torch_tensorrt.dynamo.runtime._serialized_engine_layout import (
        DEVICE_IDX, ENGINE_IDX, HW_COMPATIBLE_IDX, SERIALIZED_METADATA_IDX, TARGET_PLATFORM_IDX)
    calls = [n for n in edge_program.graph.nodes if is_engine_call(n)]
    if len(calls) != 1:
        raise blobfmt.BlobError(f"a TensorRTBackend partition holds exactly one engine call, "
                                f"found {len(calls)}")
    call = calls[0]
    raw = _engine_info(edge_program, call, metadata_only=False)
    engine = raw[ENGINE_IDX]
    if isinstance(engine, torch.Tensor):
        engine = bytes(memoryview(engine.cpu().contiguous().view(torch.uint8).numpy()))
    info = engine_info_from_serialized(raw)
    specs = {s.key: s.value for s in compile_specs}
    pairs = json.loads(specs.get(BUFFERS_SPEC, b"[]").decode())
    device = specs.get(DEVICE_SPEC, b"cuda:0").decode()
    text = [v.decode() if isinstance(v, bytes) else str(v) for v in raw]
    meta = blobfmt.BlobMetadata(
        io_bindings=_bindings(info), aliased_io=info.aliased_io, engine_kind="tensorrt",
        delegate_inputs=tuple(delegate_input_bindings(edge_program, call,
                                                      list(info.input_names))),
        delegate_outputs=tuple(delegate_output_bindings(edge_program, call,
                                                        list(info.output_names))),
        buffers=tuple(blobfmt.BufferBinding(i, f) for i, f in pairs),
        hardware_compatible=text[HW_COMPATIBLE_IDX] == "1",
        device_id=(int(device.split(":")[1]) if ":" in device
                   else int(text[DEVICE_IDX].split("%")[0])),
        serialized_metadata=text[SERIALIZED_METADATA_IDX],
        target_platform=text[TARGET_PLATFORM_IDX])
    blobfmt.validate(meta)
    return PreprocessResult(processed_bytes=blobfmt.serialize(meta, bytes(engine)))


def mutable_buffer_placeholders(ep: ExportedProgram) -> Set[str]:
    sig = ep.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    return {name for name, fqn in sig.inputs_to_buffers.items() if fqn in mutated}


def written_in_place(ep: ExportedProgram) -> Set[str]:
    """Placeholders of buffers whose mutation is declared on the buffer itself (an engine writes
    them: aliased KV, or a delegate's own copy-back)."""
    sig = ep.graph_signature
    values = list(ep.graph.output_node().args[0])
    by_fqn = {fqn: name for name, fqn in sig.inputs_to_buffers.items()}
    return {by_fqn[s.target] for i, s in enumerate(sig.output_specs)
            if s.kind == OutputKind.BUFFER_MUTATION and s.target in by_fqn
            and getattr(values[i], "name", None) == by_fqn[s.target]}


def backend_config(edge_manager, config=None, share_across_methods=None):
    """The caller's `ExecutorchBackendConfig` (or the default) plus what state needs: initial
    values of the mutable buffers serialized, their FQNs emitted, no host→device staging of state
    an engine writes itself, and
    (several methods) one allocation per buffer shared by every method, as in eager, where
    ExecuTorch can share it (`_share_state_across_methods`).
    Applying it to a config it already produced changes nothing."""
    from executorch.exir import ExecutorchBackendConfig

    from ..executorch.device_state import StateOnDevicePass
    from ..executorch.lower import InitialiseMutableBuffers
    config = config if config is not None else ExecutorchBackendConfig()
    if getattr(config, "_tte_state", False):
        return config
    names: Set[str] = set()
    on_device: Set[str] = set()
    for method in edge_manager.methods:
        names |= mutable_buffer_placeholders(edge_manager.exported_program(method))
        on_device |= written_in_place(edge_manager.exported_program(method))
    if share_across_methods is None:
        _share_state_across_methods(edge_manager, config.memory_planning_pass)
    config.passes = [*list(config.passes or ()), InitialiseMutableBuffers(names)]
    config.emit_mutable_buffer_names = True
    # state an engine writes itself stays in the engine's memory; state ExecuTorch's write-back
    # copies (a host kernel) keeps its host staging, so that copy can reach it
    config.to_out_var_pass = StateOnDevicePass(on_device, config.to_out_var_pass)
    config._tte_state = True
    return config


def _device_delegates(edge_manager) -> bool:
    for method in edge_manager.methods:
        gm = edge_manager.exported_program(method).graph_module
        for _, sub in gm.named_children():
            for spec in getattr(sub, "compile_specs", ()) or ():
                if spec.key == DEVICE_SPEC and spec.value.decode() != "cpu":
                    return True
    return False


def _share_state_across_methods(edge_manager, planner) -> None:
    """A buffer one method writes and others use shares one allocation, like eager's one module.
    ExecuTorch 1.5.1 shares mutable buffers only when every tensor lives in its default memory
    (mem_id 1); with device delegates (state in device memory) it cannot, so each method keeps its
    own copy — said in a warning naming the buffers, never silently."""
    methods = list(edge_manager.methods)
    if len(methods) < 2 or not getattr(planner, "alloc_mutable_buffers", False):
        return
    used: Dict[str, List[str]] = {}
    written = set()
    for m in methods:
        sig = edge_manager.exported_program(m).graph_signature
        written |= set(sig.buffers_to_mutate.values())
        for fqn in set(sig.inputs_to_buffers.values()):
            used.setdefault(fqn, []).append(m)
    shared = {f: ms for f, ms in used.items() if f in written and len(ms) > 1}
    if not shared:
        return
    if not _device_delegates(edge_manager):
        planner.share_mutable_buffers = True
        return
    import warnings
    warnings.warn(
        "buffers shared by several methods "
        f"({', '.join(f'{f!r}: {ms}' for f, ms in sorted(shared.items()))}) "
        "live in device memory, where ExecuTorch 1.5.1 cannot share mutable buffers between "
        "methods (MemoryPlanningPass share_mutable_buffers needs mem_id 1): each method keeps "
        "its own copy of them. Export them as one method, or copy the state between methods "
        "in the application.", UserWarning, stacklevel=3)


def stateful_edge(edge_manager):
    """The `EdgeProgramManager` torch-tensorrt's `executorch.export` returns, whose
    `to_executorch(config)` always adds `backend_config` — so a caller lowering several methods
    themselves gets initialised, named, unstaged state like `torch_tensorrt.save` does."""
    from executorch.exir import EdgeProgramManager

    class StatefulEdgeProgramManager(type(edge_manager)):
        def to_executorch(self, config=None):
            return super().to_executorch(backend_config(self, config))

    assert isinstance(edge_manager, EdgeProgramManager)
    edge_manager.__class__ = StatefulEdgeProgramManager
    return edge_manager
