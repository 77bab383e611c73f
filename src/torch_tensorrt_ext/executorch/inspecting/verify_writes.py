"""The saved program's state writes, verified from the emitted program alone.

What a buffer holds after a call of a `.pte` method is decided by the instructions ExecuTorch
emitted and by what each delegate's runtime does with its blob. This verifier reads exactly that
— the method's instruction chains, and for each TensorRTBackend delegate the runtime's *own*
binding plan of its blob (`tte_runtime_blob_writes`: the in-place outputs and the copies
`execute` makes, read from the plan it follows) — and shares no code with the compile-time
decision of who copies (`lowering.copier`) nor with the blob's Python model of it.

Invariant: `verify_writes(pte, mutated)` returns only when, in every method, each buffer the
source mutates (`mutated[method]`) is written exactly once per call — by a kernel writing its
memory (a write-back `copy_`, an `_h2d_copy` into a device buffer, any out-variant kernel whose
out is the buffer) or by a delegate that writes the buffer's own input in place or copies an
output into it — with a value that call has (an instruction's result, a method input or a
constant; never memory nothing wrote in the call, nor the buffer's own old value) of the
buffer's byte size — except a kernel updating the buffer in place (an input its schema marks
`Tensor(a!)`, of an op that is not a copy: `llama::update_cache` writing T positions of its
cache), which may write part of it, the rest keeping its value as in eager; and a buffer the
source does not mutate is written by nothing. Control flow is followed: the walk takes each
forward jump (`cond`'s branches, inlined by the emitter, their results moved into the op's
output by a `MoveCall`), so a value counts as computed where every path to it computed it, and
a buffer must be written as often on every path (a back edge, the end of a `map`/`scan` body
that runs at least once, adds nothing). A moved value is the branch's own tensor (the move hands the
EValue on): its memory is the branch value's, and an instruction writing that memory after the
move (the next control-flow op's branch, planned in the same region) leaves it no longer
computed — a write from it is refused, naming what overwrote it
(`saving.branch_results` copies such results out first). Otherwise it raises
`WriteVerifyError` naming the method, the buffer and each writer found (delegate and binding,
or kernel), and what to change.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable, Mapping

from executorch.exir import schema
from executorch.exir._serialize._program import deserialize_pte_binary

from ...errors import TteError
from .traffic import in_place_args, mutable_buffers, nbytes, written_args

__all__ = ["Writer", "WriteVerifyError", "method_writers", "mutated_by", "verify_writes"]


class WriteVerifyError(TteError, ValueError):
    """A saved program loses, duplicates or invents a state write (names method and buffer)."""


@dataclass(frozen=True)
class Writer:
    """One write into a buffer per call: `kind` "kernel" (an op, `what` its name) or
    "delegate" (`what`: "delegate <i> (<in_place|copy> <output> -> <input>)"); `value` the value
    index written from (None for an in-place engine write), `nbytes` its size."""

    kind: str
    what: str
    value: int | None
    nbytes: int
    shape: tuple[int, ...] = ()   # a kernel's source shape (a copy_ broadcasts it)
    in_place: bool = False        # a kernel updating the buffer in place (`in_place_args`)


def _blob_writes(blob: bytes) -> list[tuple[str, str, str]]:
    """(input binding, in_place|copy, output binding) for every write the runtime's plan of
    `blob` makes per call; a blob the runtime refuses raises naming the reason."""
    from ... import runtime_lib
    code, text = runtime_lib.blob_writes(blob)
    if code != 0:
        raise WriteVerifyError(f"the runtime refuses the blob: {text}")
    rows = []
    for line in text.splitlines():
        inp, _fqn, how, output = line.split("\t")
        rows.append((inp, how, output))
    return rows


def _trt_blob(program: schema.Program, plan: schema.ExecutionPlan, call: schema.DelegateCall):
    """(metadata, blob bytes) of a TensorRTBackend delegate call; None for another backend."""
    from ...contracts import blob as blobfmt
    d = plan.delegates[call.delegate_index]
    if d.id != "TensorRTBackend" or d.processed.location != schema.DataLocation.INLINE:
        return None
    data = bytes(program.backend_delegate_data[d.processed.index].data)
    return blobfmt.parse(data).metadata, data


def _delegate_writes(meta, data: bytes, args: list[int]) -> list[tuple[int, str, int | None]]:
    """(value index written, how, value index written from) for one delegate call."""
    ins, outs = list(meta.delegate_inputs), list(meta.delegate_outputs)
    found = []
    for inp, how, output in _blob_writes(data):
        if inp not in ins:
            continue
        src = args[len(ins) + outs.index(output)] if output in outs else None
        found.append((args[ins.index(inp)], f"{how} {output} -> {inp}", src))
    return found


# on one path: (values computed, writers, moved value -> the memory ranges it may hold)
_Range = tuple[int, int, int]    # (arena, first byte, end)
_State = tuple[set[int], dict[str, list[Writer]], dict[int, frozenset[_Range]]]


class _Method:
    """One execution plan, walked once in instruction order."""

    def __init__(self, program: schema.Program, plan: schema.ExecutionPlan):
        self.program, self.plan = program, plan
        self.buffers = mutable_buffers(plan)
        # what a call may write from: its inputs, the program's constants (a buffer reset to a
        # constant value every call is a real write), then each instruction's results
        self.produced: set[int] = set(plan.inputs) | {
            i for i, v in enumerate(plan.values) if isinstance(v.val, schema.Tensor)
            and v.val.allocation_info is None and v.val.data_buffer_idx > 0}
        self.writers: dict[str, list[Writer]] = {f: [] for f in self.buffers}
        self.stale: list[tuple[str, Writer, str | None]] = []   # ..., what overwrote it
        self.uneven: list[tuple[str, list[Writer]]] = []   # written on some paths of a call only
        self.staged: set[str] = set()   # buffers a host-to-device copy stages for a delegate
        self.moved: dict[int, frozenset[_Range]] = {}   # a branch result moved in: its memory
        self.overwritten: dict[int, str] = {}   # a moved value -> what wrote its memory after

    def _memory(self, index: int):
        t = self.plan.values[index].val
        a = getattr(t, "allocation_info", None)
        if a is None:
            return ("value", index)
        return ("arena", a.memory_id, (a.memory_offset_high << 32) | a.memory_offset_low)

    def _buffer_at(self, index: int) -> str | None:
        where = self._memory(index)
        for fqn, (i, _t) in self.buffers.items():
            if i == index or (where[0] == "arena" and self._memory(i) == where):
                return fqn
        return None

    def _range(self, index: int) -> frozenset[_Range]:
        """The memory value `index` holds: its planned bytes, or a moved value's source's."""
        if index in self.moved:
            return self.moved[index]
        where = self._memory(index)
        if where[0] != "arena":
            return frozenset()
        return frozenset({(where[1], where[2], where[2] + self._size(index))})

    def _overwrite(self, target: int, what: str) -> None:
        """`what` writes `target`'s memory: a moved value held there is no longer computed."""
        hit = self._range(target)
        for value, held in self.moved.items():
            if value != target and value in self.produced and any(
                    a == b and s < f and t < e for a, s, e in hit for b, t, f in held):
                self.produced.discard(value)
                self.overwritten[value] = what

    def _record(self, target: int, writer: Writer) -> None:
        fqn = self._buffer_at(target)
        if fqn is None:
            return
        self.writers[fqn].append(writer)
        if writer.value is not None and (writer.value not in self.produced
                                         or self._buffer_at(writer.value) == fqn):
            self.stale.append((fqn, writer, self.overwritten.get(writer.value)))

    def _shape(self, index: int) -> tuple[int, ...]:
        t = self.plan.values[index].val
        return tuple(t.sizes) if isinstance(t, schema.Tensor) else ()

    def _size(self, index: int | None) -> int:
        t = self.plan.values[index].val if index is not None else None
        return nbytes(t) if isinstance(t, schema.Tensor) else 0

    def _kernel(self, call: schema.KernelCall) -> None:
        op = self.plan.operators[call.op_index]
        args = list(call.args)
        written = written_args(op, len(args))
        in_place = set(in_place_args(op, len(args)))
        targets = {args[k] for k in written}   # an in-place op lists its result again, last
        sources = [a for k, a in enumerate(args) if k not in written and a not in targets
                   and isinstance(self.plan.values[a].val, schema.Tensor)]
        name = f"{op.name}.{op.overload}" if op.overload else op.name
        if op.name.endswith("_h2d_copy"):   # a delegate gets a staged copy, not the buffer
            self.staged |= {f for f in map(self._buffer_at, sources) if f is not None}
        src = sources[0] if len(sources) == 1 else None   # a copy; else the kernel computes it
        for k in written:
            at = src if src is not None else args[k]
            self._record(args[k], Writer("kernel", name, src, self._size(at), self._shape(at),
                                         k in in_place))
        for k in written:   # after its reads: a kernel reads its sources, then writes
            self._overwrite(args[k], f"kernel {name}")
        self.produced |= {args[k] for k in written}

    def _delegate(self, call: schema.DelegateCall) -> None:
        blob = _trt_blob(self.program, self.plan, call)
        if blob is None:
            return   # another backend: what it writes is its own (a buffer only it writes is
            #          reported unwritten, never assumed written)
        meta, data = blob
        args = list(call.args)
        outputs = args[len(meta.delegate_inputs):]
        self.produced |= set(outputs)
        for a in outputs:
            self._record(a, Writer("delegate", f"delegate {call.delegate_index} (output into "
                                   "the buffer's memory)", None, self._size(a)))
        for target, how, src in _delegate_writes(meta, data, args):
            size = self._size(src) if src is not None else self._size(target)
            self._record(target, Writer("delegate", f"delegate {call.delegate_index} ({how})",
                                        src, size))
        for a in outputs:
            self._overwrite(a, f"delegate {call.delegate_index}")

    def _move(self, call: schema.MoveCall) -> None:
        """A branch's result moved into the value its control-flow op returns (an EValue
        handed on, no memory written): the target holds what the source holds on this path, in
        the source's memory."""
        self.moved[call.move_to] = self._range(call.move_from)
        self.overwritten.pop(call.move_to, None)
        if call.move_from in self.produced:
            self.produced.add(call.move_to)
        else:
            self.produced.discard(call.move_to)

    def _state(self) -> _State:
        return (self.produced.copy(), {f: list(w) for f, w in self.writers.items()},
                dict(self.moved))

    def _join(self, states: list[_State]) -> None:
        """The state where paths meet: a value computed on every path, in the memory any path
        left it in; a buffer written as often on each path (else `uneven` names it)."""
        self.produced = set.intersection(*(p for p, _, _ in states))
        self.moved = {}
        for _, _, moved in states:
            for value, held in moved.items():
                self.moved[value] = self.moved.get(value, frozenset()) | held
        self.writers = states[0][1]
        for fqn in self.writers:
            counts = {len(w[fqn]) for _, w, _ in states}
            if len(counts) > 1:
                self.uneven.append((fqn, max((w[fqn] for _, w, _ in states), key=len)))
                self.writers[fqn] = max((w[fqn] for _, w, _ in states), key=len)

    def _always_false(self, index: int) -> bool:
        """A jump's condition no instruction writes, emitted `False`: the jump is taken always
        (the end of a `cond`'s true branch skipping the false one)."""
        v = self.plan.values[index].val
        return isinstance(v, schema.Bool) and not v.bool_val and index not in self.produced

    def _chain(self, instructions: list[schema.Instruction]) -> None:
        """Walk one chain following its forward jumps (a `cond`'s branches: each path sees what
        it computed, paths meet by `_join`); a backward jump (the end of a `map`/`scan` body,
        run at least once) adds nothing a later iteration did not already see."""
        incoming: dict[int, list[_State]] = {}
        live = True
        for i, ins in enumerate(instructions):
            if not self._arrive(incoming.pop(i, []), live):
                continue   # no path reaches it
            live, args = True, ins.instr_args
            if isinstance(args, schema.KernelCall):
                self._kernel(args)
            elif isinstance(args, schema.DelegateCall):
                self._delegate(args)
            elif isinstance(args, schema.MoveCall):
                self._move(args)
            elif isinstance(args, schema.JumpFalseCall) and args.destination_instruction > i:
                incoming.setdefault(args.destination_instruction, []).append(self._state())
                live = not self._always_false(args.cond_value_index)
        self._arrive(incoming.pop(len(instructions), []), live)

    def _arrive(self, jumps: list[_State], live: bool) -> bool:
        """Enter an instruction from the jumps to it and, when `live`, the one before; False
        when no path reaches it."""
        if jumps:
            self._join(jumps + ([self._state()] if live else []))
        return bool(jumps) or live

    def walk(self) -> _Method:
        for chain in self.plan.chains:
            self._chain(list(chain.instructions))
        return self


Pte = bytes | schema.Program


def _program(pte: Pte) -> schema.Program:
    """The emitted program: as given (before serialization, no copy), or read from `.pte` bytes."""
    return pte if isinstance(pte, schema.Program) else deserialize_pte_binary(bytes(pte)).program


def method_writers(pte: Pte) -> dict[str, dict[str, list[Writer]]]:
    """Method -> buffer FQN -> the writers one call of it runs (what `verify_writes` checks)."""
    program = _program(pte)
    return {plan.name: _Method(program, plan).walk().writers for plan in program.execution_plan}


def _text(writers: Iterable[Writer]) -> str:
    return ", ".join(f"{w.kind} {w.what}" for w in writers) or "nothing"


def verify_writes(pte: Pte, mutated: Mapping[str, Iterable[str]]) -> None:
    """Refuse `pte` (`.pte` bytes, or the emitted `schema.Program`) unless every method writes
    exactly the buffers `mutated` names for it, each once per call with a value computed in that
    call of the buffer's size (module docstring)."""
    program = _program(pte)
    for plan in program.execution_plan:
        m = _Method(program, plan).walk()
        want = set(mutated.get(plan.name, ()))
        missing = sorted(want - set(m.buffers))
        if missing:
            raise WriteVerifyError(f"method {plan.name!r}: buffer {missing[0]!r} is mutated by the "
                                   "source but is no mutable buffer of the saved program")
        for fqn, writers in m.uneven:
            raise WriteVerifyError(
                f"method {plan.name!r}: buffer {fqn!r} is written on some paths of a call only "
                f"(by {_text(writers)}, inside a branch of a control-flow op): on the others its "
                "write would be lost or differ from eager. Write the buffer after the branch, from "
                "the value the branches return, and report this with the program")
        for fqn, w, overwriter in m.stale:
            if overwriter is not None:
                raise WriteVerifyError(
                    f"method {plan.name!r}: buffer {fqn!r} is written by {w.kind} {w.what} from "
                    "the result of a control-flow op (a torch.cond branch's tensor, handed on by "
                    f"a move) whose memory {overwriter} overwrites before the write: "
                    "the buffer would get that instruction's values. Save through "
                    "torch_tensorrt.save / tte.executorch (whose config copies such results out, "
                    "saving.branch_results), and report this with the program")
        for fqn, writers in sorted(m.writers.items()):
            t = m.buffers[fqn][1]
            _check_buffer(plan.name, fqn, writers, fqn in want, nbytes(t), tuple(t.sizes),
                          fqn in m.staged)
        for fqn, w, _ in m.stale:
            raise WriteVerifyError(
                f"method {plan.name!r}: buffer {fqn!r} is written by {w.kind} {w.what} from a "
                "value nothing computes in this call (memory no instruction wrote, or the "
                "buffer's own old value): the write would not carry the call's new state. Please "
                "report this with the program")


def _broadcasts(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """`src` broadcasts to `dst` (right-aligned, each size equal or 1)."""
    return len(src) <= len(dst) and all(s in (1, d) for s, d in zip(reversed(src),
                                                                    reversed(dst), strict=False))


def _check_buffer(method: str, fqn: str, writers: list[Writer], mutated: bool,
                  nbytes: int, shape: tuple[int, ...], staged: bool = False) -> None:
    if mutated and not writers:
        why = ("the delegate is handed a host-to-device staged copy of it (et_copy._h2d_copy), "
               "so the engine's write lands in the copy" if staged else "the write would be lost")
        raise WriteVerifyError(
            f"method {method!r}: buffer {fqn!r} is mutated by the source, but no instruction of "
            "the saved program writes it (no write-back copy, no delegate writing or copying into "
            f"its binding): {why}. Compile the model again with the patched "
            "torch_tensorrt.compile, and report this with the program")
    if len(writers) > 1:
        raise WriteVerifyError(
            f"method {method!r}: buffer {fqn!r} is written {len(writers)} times per call, by "
            f"{_text(writers)}; exactly one writer is allowed (the last would win, the others "
            "are wasted copies or a lost ordering). Please report this with the program")
    if writers and not mutated:
        raise WriteVerifyError(
            f"method {method!r}: buffer {fqn!r} is not mutated by the source, but the saved "
            f"program writes it ({_text(writers)}); it would not keep its value like eager")
    for w in writers:   # a kernel updating it in place may write part of it (update_cache)
        if w.nbytes != nbytes and not w.in_place and \
                not (w.kind == "kernel" and _broadcasts(w.shape, shape)):
            raise WriteVerifyError(
                f"method {method!r}: buffer {fqn!r} ({nbytes} bytes) is written by {w.kind} "
                f"{w.what} with {w.nbytes} bytes; the write must cover the whole buffer")


def mutated_by(source) -> dict[str, set[str]]:
    """Method -> the buffers the source program mutates (its functional form's writes, those
    inside higher-order ops such as `torch.no_grad()` blocks included): from an
    `ExportedProgram` (method "forward"), a `{method: ExportedProgram}` mapping, or
    `{method: FQNs}` as it is."""
    from torch.export import ExportedProgram

    from ...lowering.graph_writes import buffer_writers
    if isinstance(source, ExportedProgram):
        source = {"forward": source}
    return {m: set(buffer_writers(p)) if isinstance(p, ExportedProgram) else set(p)
            for m, p in source.items()}
