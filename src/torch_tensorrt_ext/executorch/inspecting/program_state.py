"""A saved program's state, checked across all of its methods from the emitted program alone.

A program is one stateful object: every buffer any method mutates is one allocation, used by
every method that takes it, and no method's planned memory (scratch, outputs) lies on it. Each
method's own check (`verify_writes`) cannot see that; this one compares the methods' emitted
plans with each other.

Which planned memory is one allocation is decided by how a program is loaded: a host-only program
with no record of shared arenas shares each of its first two planned arenas (mem_id 1 and 2)
across methods — ExecuTorch's `Module(share_memory_arenas=True)`, which ExecuTorch's own runners
and this runtime's loader use; a program with a record (`contracts.shared_arenas.RECORD_KEY`)
shares exactly the arenas it records; every other planned buffer is the method's own.

Invariant: `state_faults(pte)` lists, each naming the buffer and both methods, every buffer that
(a) two methods hold as state at different allocations or offsets, (b) two methods hold with a
different dtype or shape, (c) lies where another method plans memory of its own (a planned tensor
of that method that is not its view of the same buffer), or — given the source's uses, `uses`
({method: {fqn: mutated}}: the buffers each method reads or writes) — (d) one method takes as a
constant (a snapshot of its initial value) while another mutates it, or (e) two methods load with
different initial values (loading a method writes its initial values into the buffer, so the
program would start from whichever method a loader loads last: methods exported from copies of a
module in different states). Faults are found from the emitted program, its mutable data and the
record, never from the passes' own records of what they planned.
"""
from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from executorch.exir import schema

from ...errors import TteError
from .traffic import nbytes

__all__ = ["ProgramStateError", "StateFault", "check_program_state", "declared_uses",
           "source_uses", "state_faults"]

_SHARED_BY_LOADERS = (1, 2)        # mem_ids Module(share_memory_arenas=True) shares


class ProgramStateError(TteError, ValueError):
    """The methods of a saved program do not hold one state: the message names the first fault's
    buffer and methods (and how many more there are); `faults` holds every one."""

    def __init__(self, faults: Sequence[StateFault]):
        more = f" ({len(faults) - 1} more)" if len(faults) > 1 else ""
        super().__init__(faults[0].text + more)
        self.faults = tuple(faults)

    def __reduce__(self):          # pickled (a worker's result) with its faults
        return type(self), (self.faults,)


@dataclass(frozen=True)
class StateFault:
    fqn: str
    methods: tuple[str, str]
    text: str


@dataclass(frozen=True)
class _Placed:
    method: str
    fqn: str | None                # None: a planned tensor that is no named buffer
    where: tuple                   # the allocation (shared key, or (method, mem_id))
    start: int
    end: int
    dtype: int
    shape: tuple[int, ...]
    value: int
    initial: memoryview | None = None   # the initial value its method's load writes


def _record(named) -> dict | None:
    """The record of shared arenas in `named` (a NamedDataStoreOutput: the file's named data)."""
    from ...contracts.shared_arenas import RECORD_KEY
    entry = named.pte_data.get(RECORD_KEY) if named is not None else None
    return None if entry is None else json.loads(bytes(named.buffers[entry.buffer_index]))


def _has_device_arenas(program: schema.Program) -> bool:
    return any(int(d.device_type) != int(schema.DeviceType.CPU)
               for plan in program.execution_plan
               for d in (getattr(plan, "non_const_buffer_device", None) or ()))


def _allocation(method: str, mem_id: int, record: dict | None, host_shared: bool) -> tuple:
    """Which allocation a method's planned arena `mem_id` is, as loaders load the program."""
    if record is not None:
        index = record.get("methods", {}).get(method, [])
        if mem_id - 1 in index:
            return ("state arena", index.index(mem_id - 1))
        return (method, mem_id)
    if host_shared and mem_id in _SHARED_BY_LOADERS:
        return ("arena", mem_id)
    return (method, mem_id)


def _initial(t: schema.Tensor, mutable, size: int) -> memoryview | None:
    """The initial value a method's load writes into planned tensor `t` (its mutable data), a
    view of the program's bytes: a KV cache's initial value is not copied to be compared."""
    if not t.data_buffer_idx or not mutable or t.data_buffer_idx >= len(mutable):
        return None
    return memoryview(mutable[t.data_buffer_idx].storage)[:size]


def _placed(program: schema.Program, record: dict | None, mutable=None) -> list[_Placed]:
    host_shared = record is None and not _has_device_arenas(program)
    out = []
    for plan in program.execution_plan:
        for i, v in enumerate(plan.values):
            t = v.val
            if not isinstance(t, schema.Tensor) or t.allocation_info is None:
                continue
            a = t.allocation_info
            start = (a.memory_offset_high << 32) | a.memory_offset_low
            info = t.extra_tensor_info
            fqn = info.fully_qualified_name if info is not None else None
            size = nbytes(t)
            out.append(_Placed(plan.name, fqn or None,
                               _allocation(plan.name, a.memory_id, record, host_shared),
                               start, start + size, int(t.scalar_type), tuple(t.sizes), i,
                               _initial(t, mutable, size) if fqn else None))
    return out


def _shape_text(p: _Placed) -> str:
    from ...contracts.dtypes import SCALAR_TYPES
    return f"{SCALAR_TYPES.get(p.dtype, (str(p.dtype),))[0]} {list(p.shape)}"


def _agreement(state: dict[str, list[_Placed]]) -> Iterable[StateFault]:
    """(a), (b) and (e): each buffer's placements in every method against its first method's
    (and its initial value against the first method's that has one)."""
    for fqn, places in sorted(state.items()):
        first = places[0]
        for p in places[1:]:
            if p.method == first.method:
                continue
            pair = (first.method, p.method)
            if (p.dtype, p.shape) != (first.dtype, first.shape):
                yield StateFault(fqn, pair, (
                    f"methods {first.method!r} and {p.method!r} disagree about buffer {fqn!r}: "
                    f"{_shape_text(first)} in {first.method!r}, {_shape_text(p)} in "
                    f"{p.method!r}; one buffer has one dtype and shape in every method"))
            elif (p.where, p.start) != (first.where, first.start):
                yield StateFault(fqn, pair, (
                    f"buffer {fqn!r} is not one allocation: method {first.method!r} holds it at "
                    f"{_where_text(first)}, method {p.method!r} at {_where_text(p)}; a write by "
                    "one method would not be seen by the other"))
        valued = [p for p in places if p.initial is not None]
        for p in valued[1:]:
            if p.initial != valued[0].initial and p.method != valued[0].method:
                yield StateFault(fqn, (valued[0].method, p.method), (
                    f"methods {valued[0].method!r} and {p.method!r} hold different initial values "
                    f"of buffer {fqn!r} ({_differ(valued[0].initial, p.initial, first)}): loading "
                    "a method writes its initial value into the buffer, so the program would "
                    "start from whichever method loads last. Export every method from the module "
                    "in one state (methods exported from copies of it, or after calls, carry the "
                    "values their copy held)"))
                break


def _differ(a: memoryview, b: memoryview, p: _Placed) -> str:
    """How two initial values of `p`'s buffer differ, as elements."""
    from ...contracts.dtypes import SCALAR_TYPES
    n = math.prod(p.shape)
    size = max(1, (p.end - p.start) // max(1, n))
    differing = [i for i in range(n) if a[i * size:(i + 1) * size] != b[i * size:(i + 1) * size]]
    name = SCALAR_TYPES.get(p.dtype, (str(p.dtype),))[0]
    first = differing[0] if differing else 0
    return f"{len(differing)} of {n} {name} elements differ, the first at element {first}"


def _where_text(p: _Placed) -> str:
    kind, key = p.where
    arena = f"arena {key}" if kind in ("arena", "state arena") else f"its own arena {key}"
    return f"{arena} offset {p.start}"


def _overlaps(state: dict[str, list[_Placed]], placed: list[_Placed]) -> Iterable[StateFault]:
    """(c): planned memory of a method that lies on another method's state."""
    regions: dict[tuple, list[_Placed]] = {}
    for places in state.values():
        for p in places:
            regions.setdefault(p.where, []).append(p)
    starts = {}
    for where, ps in regions.items():
        ps.sort(key=lambda p: p.start)
        starts[where] = [p.start for p in ps]
    held = {(p.method, p.fqn, p.where, p.start) for ps in state.values() for p in ps}
    seen: set[tuple[str, str, str]] = set()
    for q in placed:
        ps = regions.get(q.where)
        if not ps or q.end <= q.start:
            continue
        k = bisect.bisect_left(starts[q.where], q.end)
        for p in reversed(ps[:k]):
            if p.end <= q.start or p.method == q.method:
                continue
            if q.fqn == p.fqn or (q.method, p.fqn, p.where, p.start) in held:
                continue          # the same buffer, or this method's own view of it
            key = (p.fqn, p.method, q.method)
            if key in seen:
                continue
            seen.add(key)
            what = f"its buffer {q.fqn!r}" if q.fqn else f"a tensor of its own (value {q.value})"
            yield StateFault(p.fqn, (p.method, q.method), (
                f"buffer {p.fqn!r} (state of method {p.method!r}, {_where_text(p)}, "
                f"{p.end - p.start} bytes) lies where method {q.method!r} plans {what} "
                f"({_where_text(q)}, {q.end - q.start} bytes): calling {q.method!r} would "
                f"overwrite {p.fqn!r}"))


def _constants(state: dict[str, list[_Placed]],
               uses: Mapping[str, Mapping[str, bool]]) -> Iterable[StateFault]:
    """(d): a method takes as a constant a buffer another method mutates."""
    writers: dict[str, list[str]] = {}
    for method, taken in uses.items():
        for fqn, mutated in taken.items():
            if mutated:
                writers.setdefault(fqn, []).append(method)
    held = {(p.method, fqn) for fqn, ps in state.items() for p in ps}
    for method, taken in sorted(uses.items()):
        for fqn in sorted(taken):
            others = [w for w in sorted(writers.get(fqn, ())) if w != method]
            if others and (method, fqn) not in held:
                yield StateFault(fqn, (method, others[0]), (
                    f"method {method!r} reads buffer {fqn!r} as a constant (its initial value, "
                    f"frozen at save) while method {others[0]!r} writes it: {method!r} would "
                    "never see the writes. Every method must take a mutated buffer as state"))


def state_faults(pte=None, uses: Mapping[str, Mapping[str, bool]] | None = None, *,
                 program: schema.Program | None = None, named=None,
                 mutable=None) -> list[StateFault]:
    """Every fault of the module docstring in `pte` (`.pte` bytes) — or in an emitted
    `program`, its named data `named` (a NamedDataStoreOutput) and its mutable data `mutable`
    (the initial values: ExecuTorch's list of buffers; None: (e) is not asked) before they are
    written; `uses` adds (d)."""
    if program is None:
        from executorch.exir._serialize._program import deserialize_pte_binary
        read = deserialize_pte_binary(bytes(pte))
        program, named, mutable = read.program, read.named_data, read.mutable_data
    record = _record(named)
    placed = _placed(program, record, mutable)
    state: dict[str, list[_Placed]] = {}
    for p in placed:
        if p.fqn is not None:
            state.setdefault(p.fqn, []).append(p)
    faults = list(_agreement(state))
    faults += list(_overlaps(state, placed))
    if uses is not None:
        faults += list(_constants(state, uses))
    return faults


def check_program_state(pte=None, uses: Mapping[str, Mapping[str, bool]] | None = None, *,
                        program: schema.Program | None = None, named=None,
                        mutable=None) -> None:
    """Raise `ProgramStateError` with every fault `state_faults` finds, the first named."""
    faults = state_faults(pte, uses, program=program, named=named, mutable=mutable)
    if faults:
        raise ProgramStateError(faults)


def _taken(ep, mutated: set[str]) -> dict[str, bool]:
    """{FQN: mutated} for each buffer `ep` reads or writes (`mutated`: the FQNs it writes).
    torch.export lifts every buffer of the module into every method's signature: one a method
    never touches is no use of it."""
    read = {n.name for n in ep.graph_module.graph.find_nodes(op="placeholder") if n.users}
    return {fqn: fqn in mutated for name, fqn in ep.graph_signature.inputs_to_buffers.items()
            if name in read or fqn in mutated}


def declared_uses(programs) -> dict[str, dict[str, bool]]:
    """`{method: ExportedProgram}` about to be lowered -> {method: {FQN: whether its signature
    declares it mutated}} for every buffer the method reads or writes."""
    return {m: _taken(ep, set(ep.graph_signature.buffers_to_mutate.values()))
            for m, ep in programs.items()}


def source_uses(source) -> dict[str, dict[str, bool]] | None:
    """The uses (d) needs, from the program a `.pte` was saved from: an ExportedProgram (method
    "forward") or `{method: ExportedProgram}`, its writes read as the verifier reads them
    (`verify_writes.mutated_by`); None for `{method: FQNs}` (no buffer list to read)."""
    from torch.export import ExportedProgram

    from .verify_writes import mutated_by
    programs = {"forward": source} if isinstance(source, ExportedProgram) else dict(source)
    if not all(isinstance(p, ExportedProgram) for p in programs.values()):
        return None
    mutated = mutated_by(programs)
    return {m: _taken(p, mutated[m]) for m, p in programs.items()}
