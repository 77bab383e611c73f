"""What a saved `.pte` holds, as a user asks it: methods, delegates, state.

Invariant: every figure comes from the file's bytes alone — the flatbuffer program, its delegate
blobs (parsed and validated like the runtime does) and its mutable-data segment — never from the
model that wrote it. A buffer is `kv_alias` when a delegate writes it in place (its blob aliases
an output to the buffer's input binding), `copy_back` when its new value is copied into it (a
copy op of the program, or the delegate's own copy-back), `in_place` when a host kernel of the
program writes it in place (its schema marks the argument mutable: ExecuTorch llama's
`llama::update_cache`), `read_only` otherwise. A buffer the program itself copies or writes names
what forces that host path (`host_path`): the host kernels that write it in place, or that touch
the buffer or the value written back into it, else the write-back alone. `shared` is the
program's record of the state arenas its methods share (`contracts.shared_arenas.RECORD_KEY`),
as written; `state_faults` every way its methods do not hold one state
(`program_state.state_faults`).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from executorch.exir import schema
from executorch.exir._serialize._program import deserialize_pte_binary

from ...contracts import blob as blobfmt
from ...contracts.dtypes import SCALAR_TYPES
from .traffic import (COPY_OPS, LINK_OPS, mutable_buffers, nbytes, plan_copy_paths,
                      written_args)
from ...errors import UnknownName

def dtype(scalar_type) -> str:
    """The contract's dtype name (`float32`, `int64`, ...) of an ExecuTorch scalar type."""
    return SCALAR_TYPES.get(int(scalar_type), (str(scalar_type),))[0]


@dataclass(frozen=True)
class DelegateInfo:
    index: int
    backend: str
    magic: str = ""
    engine_kind: str = ""
    engine_bytes: int = 0
    bindings: tuple[tuple[str, str, tuple[int, ...], bool], ...] = ()  # name, dtype, shape, input
    aliased_io: tuple[tuple[str, str], ...] = ()     # (output, input)
    buffers: tuple[tuple[str, str], ...] = ()        # (input binding, fqn)
    copy_back: tuple[tuple[str, str], ...] = ()      # (output, input)
    delegate_inputs: tuple[str, ...] = ()
    delegate_outputs: tuple[str, ...] = ()
    weight_streaming_budget: int | None = None   # bytes of weights kept on the device
    max_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (binding, max_shape): dynamic ones
    # a reference engine's weights: (named-data key, bytes, held in the .pte — else a data file)
    weights: tuple[tuple[str, int, bool], ...] = ()
    # a TensorRT plan kept as named data (version 5 engine_data): (key, bytes, held in the .pte)
    plan: tuple[str, int, bool] | None = None


@dataclass(frozen=True)
class BufferInfo:
    fqn: str
    kind: str                  # kv_alias | copy_back | in_place | read_only
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    device: str
    initial_value: bool
    program_copy_bytes: int    # bytes the program's own copy ops move per call
    delegate: int | None = None
    binding: str | None = None
    program_link_bytes: int = 0   # of those, across the host-device link (PCIe on a GPU)
    host_path: str = ""           # what makes the program copy it (empty: it does not)
    delegate_copy_bytes: int = 0  # bytes its delegate copies into it per call (its copy_back)


@dataclass(frozen=True)
class MethodInfo:
    name: str
    delegates: tuple[DelegateInfo, ...] = ()
    buffers: tuple[BufferInfo, ...] = ()


@dataclass(frozen=True)
class SharedArena:
    device: str
    nbytes: int
    buffers: tuple[tuple[str, int], ...]           # (fqn, offset)
    methods: tuple[tuple[str, int], ...]           # (method, its planned-buffer index)


@dataclass(frozen=True)
class PteInfo:
    methods: tuple[MethodInfo, ...] = field(default_factory=tuple)
    shared: tuple[SharedArena, ...] = ()   # state arenas every method shares (device programs)
    # how the methods fail to hold one state (program_state.state_faults), each naming the
    # buffer and both methods: a file written before state had memory of its own
    state_faults: tuple[str, ...] = ()

    def method(self, name: str) -> MethodInfo:
        for m in self.methods:
            if m.name == name:
                return m
        raise UnknownName(f"no method {name!r}; methods: {[m.name for m in self.methods]}")

    def to_dict(self) -> dict:
        return asdict(self)


def _delegate(program: schema.Program, index: int, d: schema.BackendDelegate,
              in_pte: frozenset = frozenset()) -> DelegateInfo:
    if d.id != "TensorRTBackend" or d.processed.location != schema.DataLocation.INLINE:
        return DelegateInfo(index, d.id)
    blob = blobfmt.parse(program.backend_delegate_data[d.processed.index].data)
    m = blob.metadata
    return DelegateInfo(
        index, d.id, blob.magic.decode(), m.engine_kind, len(blob.engine),
        tuple((b.name, b.dtype, tuple(b.shape), b.is_input) for b in m.io_bindings),
        tuple((a.output, a.input) for a in m.aliased_io),
        tuple((b.input, b.fqn) for b in m.buffers),
        tuple((c.output, c.input) for c in m.copy_back),
        tuple(m.delegate_inputs), tuple(m.delegate_outputs), m.weight_streaming_budget,
        tuple((b.name, tuple(b.max_shape)) for b in m.io_bindings if b.max_shape),
        tuple((w.key, w.nbytes, w.key in in_pte) for w in m.weights),
        None if m.engine_data is None else
        (m.engine_data.key, m.engine_data.nbytes, m.engine_data.key in in_pte))


def _kernel_calls(plan: schema.ExecutionPlan):
    for chain in plan.chains:
        for ins in chain.instructions:
            if isinstance(ins.instr_args, schema.KernelCall):
                yield plan.operators[ins.instr_args.op_index].name, list(ins.instr_args.args)


def _in_place_writers(plan: schema.ExecutionPlan) -> dict[int, list[str]]:
    """Value index -> the host kernels (not copies) writing it in place, as `ns::op.overload`."""
    out: dict[int, list[str]] = {}
    for chain in plan.chains:
        for ins in chain.instructions:
            call = ins.instr_args
            if not isinstance(call, schema.KernelCall):
                continue
            op = plan.operators[call.op_index]
            if op.name in COPY_OPS:
                continue
            for k in written_args(op, len(call.args)):
                out.setdefault(call.args[k], []).append(f"{op.name}.{op.overload or 'default'}")
    return out


def _host_path(plan: schema.ExecutionPlan, calls: list[tuple[str, list[int]]], index: int,
               writers: list[str]) -> str:
    """What keeps buffer value `index` on a host path: the host kernels writing it in place
    (`writers`), or touching it or the value a host copy writes into it (`calls`, the plan's);
    else that copy (a write-back) alone."""
    if writers:
        return "host kernels write it in place: " + ", ".join(sorted(set(writers)))
    copies = [(name, args) for name, args in calls
              if name in COPY_OPS and name not in LINK_OPS and index in args]
    if not copies:
        # a buffer kept on the device that host kernels read or write: staged across the link
        links = [args for name, args in calls if name in LINK_OPS and index in args]
        values = {a for args in links for a in args} - {index}
        ops = sorted({name for name, args in calls if name not in COPY_OPS
                      and values & set(args)})
        return "host kernels touch it or its new value: " + ", ".join(ops) if ops else ""
    values = {index} | {a for _, args in copies for a in args}
    ops = sorted({name for name, args in calls if name not in COPY_OPS
                  and values & set(args)})
    if ops:
        return "host kernels touch it or its new value: " + ", ".join(ops)
    if (values - {index}) & set(plan.outputs):
        return "its new value is also an output of the method"
    return "the program writes its new value back (" + ", ".join(
        sorted({name for name, _ in copies})) + ")"


def _buffer(fqn: str, t: schema.Tensor, delegates: list[DelegateInfo], paths: dict[str, int],
            has_mutable_data: bool, host_path: str, written_in_place: bool) -> BufferInfo:
    copies = sum(paths.values())
    kind, where, binding, delegate_copies = "read_only", None, None, 0
    for d in delegates:
        inputs = {i for i, f in d.buffers if f == fqn}
        if not inputs:
            continue
        where, binding = d.index, sorted(inputs)[0]
        if any(i in inputs for _, i in d.aliased_io):
            kind = "kv_alias"
        elif any(i in inputs for _, i in d.copy_back):
            kind, delegate_copies = "copy_back", nbytes(t)
    if kind == "read_only" and copies:
        kind = "copy_back"
    if kind == "read_only" and written_in_place:
        kind = "in_place"
    info = t.extra_tensor_info
    device = "cpu"
    if info is not None and info.device_type == schema.DeviceType.CUDA:
        device = f"cuda:{info.device_index}"
    return BufferInfo(fqn, kind, dtype(t.scalar_type), tuple(t.sizes),
                      nbytes(t), device, bool(has_mutable_data and t.data_buffer_idx),
                      copies, where, binding, paths.get("link", 0), host_path, delegate_copies)


def inspect_pte(data: bytes) -> PteInfo:
    pte = deserialize_pte_binary(bytes(data))
    program = pte.program
    has_mutable = bool(pte.mutable_data)
    methods = []
    in_pte = frozenset(pte.named_data.pte_data) if pte.named_data is not None else frozenset()
    for plan in program.execution_plan:
        delegates = [_delegate(program, i, d, in_pte) for i, d in enumerate(plan.delegates)]
        copies = plan_copy_paths(plan)
        calls = list(_kernel_calls(plan))
        writers = _in_place_writers(plan)
        buffers = tuple(_buffer(fqn, t, delegates, copies.get(fqn, {}), has_mutable,
                                _host_path(plan, calls, i, writers.get(i, [])), i in writers)
                        for fqn, (i, t) in sorted(mutable_buffers(plan).items()))
        methods.append(MethodInfo(plan.name, tuple(delegates), buffers))
    from .program_state import state_faults
    faults = tuple(f.text for f in state_faults(program=program, named=pte.named_data,
                                                mutable=pte.mutable_data))
    return PteInfo(tuple(methods), _shared(pte), faults)


def _shared(pte) -> tuple[SharedArena, ...]:
    from ...contracts.shared_arenas import RECORD_KEY
    named = pte.named_data
    entry = named.pte_data.get(RECORD_KEY) if named is not None else None
    if entry is None:
        return ()
    record = json.loads(bytes(named.buffers[entry.buffer_index]))
    return tuple(SharedArena(a["device"], a["bytes"], tuple(sorted(a["buffers"].items(),
                                                                  key=lambda kv: kv[1])),
                             tuple((m, ix[k]) for m, ix in sorted(record["methods"].items())))
                 for k, a in enumerate(record["arenas"]))
