"""Who copies a copy-back write into its buffer: the one decision, for every engine kind.

A copy-back write's new value leaves an engine as an output. Either the engine's delegate copies
it into the buffer itself — one copy in the buffer's own (device) memory, right after the engine,
on its stream — or the program writes it back (`aten.copy_` in PyTorch, ExecuTorch's write-back
copy in a `.pte`: on a GPU the buffer then lives in host memory, staged in and fetched out every
call).

Invariant: `decide` is the only function in the package that makes this decision, for reference
and TensorRT engines alike, and it reads nothing but the facts of one `CopySite` (gathered once,
from the compiled graph, by `sites`). Its result is recorded once per write — in the plan
(`BufferWrite.engine_copies`) and in the engine module's own copy record
(`engines.engine_module.record_copy`, one protocol for reference and TensorRT engine modules,
carried into the engine call's record as `EngineInfo.copy_back`) — and every stage downstream
(declaration, ExecuTorch lowering, blob, runtime, `inspect`) reads that record; none decides
again. A value the
program also reads (returned to the caller, or read by another op) does not stop the delegate:
it is then both handed out and copied into the buffer. Each engine output is copied into at most
one buffer (the first write in plan order; a second buffer taking the same value is the
program's).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from collections.abc import Iterable, Mapping, Sequence

from torch.fx import Node

from ..contracts.plan import BufferWrite, Copier, WriteKind

__all__ = ["CopySite", "CopyDecision", "decide", "sites", "describe"]


@dataclass(frozen=True)
class CopySite:
    """The facts of one copy-back write that the decision reads, and nothing else.

    `engine`/`output`: the engine call whose output binding is the new value (None: the value is
    not an engine output; `computed_by` says what computes it). `input`: the engine's input binding
    carrying the buffer (None: the engine does not take it). `buffer_readers`: what else in the
    program reads or writes the buffer. `mismatch`: why the output cannot be copied byte for byte
    into the buffer (dtype, shape, a dynamic dimension), or "". `hands_out`: the engine call
    returns something the program reads — the new value itself included (a delegate returning
    nothing is dropped by ExecuTorch). `claimed_by`: a buffer already copied from this output."""

    fqn: str
    engine: str | None
    output: str | None = None
    input: str | None = None
    computed_by: str = ""
    buffer_readers: tuple[str, ...] = ()
    mismatch: str = ""
    hands_out: bool = True
    claimed_by: str | None = None


@dataclass(frozen=True)
class CopyDecision:
    fqn: str
    copier: Copier
    why: str
    engine: str | None = None
    output: str | None = None
    input: str | None = None


def decide(site: CopySite) -> CopyDecision:
    """The delegate copies the write exactly when it can do it alone and nothing observes the
    difference: the value is an engine output of the buffer's dtype and static shape, the same
    engine takes the buffer, nothing else reads or writes the buffer, the call hands something
    out, and no other buffer copies from the same output."""
    def program(why: str) -> CopyDecision:
        return CopyDecision(site.fqn, Copier.PROGRAM, f"written back by the program: {why}")

    if site.engine is None or site.output is None:
        return program(f"its new value is computed by {site.computed_by or 'the program'}, not "
                       "handed out by an engine")
    if site.input is None:
        return program(f"engine {site.engine!r} does not take the buffer as an input")
    if site.buffer_readers:
        return program("the buffer is also read by " + ", ".join(site.buffer_readers)
                       + " (a copy right after the engine would change what it reads)")
    if site.mismatch:
        return program(f"output {site.output!r} {site.mismatch}")
    if not site.hands_out:
        return program(f"engine {site.engine!r} hands out nothing the program reads (ExecuTorch "
                       "drops a delegate returning nothing)")
    if site.claimed_by is not None:
        return program(f"output {site.output!r} is already copied into buffer "
                       f"{site.claimed_by!r}")
    return CopyDecision(site.fqn, Copier.ENGINE,
                        f"engine {site.engine!r} copies output {site.output!r} into input "
                        f"{site.input!r} itself (one copy in the buffer's memory)",
                        site.engine, site.output, site.input)


def describe(node: Node) -> str:
    if node.op == "output":
        return "the program's outputs"
    if node.op == "call_module":   # torch-tensorrt names PyTorch-run pieces _run_on_gpu_<i>
        run_by = "PyTorch-run piece" if "_run_on_gpu" in str(node.target) else "engine"
        return f"{run_by} {node.target!r}"
    return f"{node.target} ({node.name})" if node.op == "call_function" else node.name


def _engine_call(value: Node, engine: str) -> Node | None:
    """The call of `engine` producing `value` (its getitem, or the call itself)."""
    call = value.args[0] if value.target is operator.getitem else value
    return call if call.op == "call_module" and call.target == engine else None


def _val(value: Node):
    """The value's fake tensor: its own, or its engine call's k-th result."""
    if "val" in value.meta or value.target is not operator.getitem:
        v = value.meta.get("val")   # a single-result engine call may record [result]
        return v[0] if isinstance(v, (list, tuple)) and len(v) == 1 else v
    vals = value.args[0].meta.get("val")
    k = value.args[1]
    return vals[k] if isinstance(vals, (list, tuple)) and k < len(vals) else None


def _mismatch(value: Node, buffer: Node) -> str:
    v, b = _val(value), buffer.meta.get("val")
    if v is None or b is None or not hasattr(v, "shape"):
        return "has no recorded shape to compare with the buffer's"
    shape = tuple(v.shape)
    if any(not isinstance(d, int) for d in shape):
        return f"has a dynamic shape {list(shape)}; the delegate's copy needs a static one"
    if shape != tuple(b.shape) or v.dtype != b.dtype:
        return (f"({v.dtype} {list(shape)}) is not the buffer's dtype and shape "
                f"({b.dtype} {list(b.shape)})")
    return ""


def _hands_out(call: Node, user_outputs: set) -> bool:
    items = [call] if not any(u.target is operator.getitem for u in call.users) else \
        [u for u in call.users if u.target is operator.getitem]
    return any(i in user_outputs or any(u.op != "output" for u in i.users) for i in items)


def sites(plan: Iterable[BufferWrite], values: Mapping[str, Node], buffers: Mapping[str, Node],
          user_outputs: Sequence[Node]) -> list[CopySite]:
    """The facts of each copy-back write of `plan`, read from a compiled module's graph before
    any write-back is added: `values[fqn]` is the buffer's new value, `buffers[fqn]` the node
    reading the buffer (its get_attr), `user_outputs` what the module returns."""
    users = set(user_outputs)
    claimed: dict[tuple[str, str], str] = {}
    out: list[CopySite] = []
    for w in plan:
        if w.kind is not WriteKind.COPY_BACK:
            continue
        value, buffer = values[w.fqn], buffers[w.fqn]
        call = _engine_call(value, w.engine) if w.engine else None
        if call is None or w.output_binding is None:
            out.append(CopySite(w.fqn, None, computed_by=describe(value)))
            continue
        takes = w.input_binding is not None and buffer in call.args
        readers = tuple(describe(u) for u in buffer.users if u is not call)
        key = (w.engine, w.output_binding)
        site = CopySite(w.fqn, w.engine, w.output_binding, w.input_binding if takes else None,
                        buffer_readers=readers, mismatch=_mismatch(value, buffer),
                        hands_out=_hands_out(call, users), claimed_by=claimed.get(key))
        if decide(site).copier is Copier.ENGINE:
            claimed[key] = w.fqn
        out.append(site)
    return out
