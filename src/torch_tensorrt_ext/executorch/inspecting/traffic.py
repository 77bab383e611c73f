"""Static state traffic of an emitted program: the copy ops it runs on each mutable buffer.

Invariant: for every mutable buffer (found by the fully qualified name ExecuTorch records with
`emit_mutable_buffer_names`), `program_copy_paths` counts the bytes of every copy-like kernel call
(`aten::copy_`, `copy.out`, `et_copy::_h2d_copy`/`_d2h_copy`) whose source or destination is that
buffer's memory, per method call, by path: `link` for ExecuTorch's host<->device copies (PCIe on
a GPU), `host` for its host kernels; `program_copy_bytes` is their sum. Delegate-internal copies
are not in the program; the runtime counts those itself (`runtime_lib.copy_bytes`, by path
`runtime_lib.copy_bytes_by_path`).
"""
from __future__ import annotations


from executorch.exir import schema

from ...contracts.dtypes import SCALAR_TYPES

COPY_OPS = ("aten::copy_", "aten::copy", "et_copy::_h2d_copy", "et_copy::_d2h_copy")
LINK_OPS = ("et_copy::_h2d_copy", "et_copy::_d2h_copy")   # the rest are host kernels
def nbytes(t: schema.Tensor) -> int:
    """The bytes tensor `t` holds: its dtype's size (`SCALAR_TYPES`) times each of its sizes."""
    n = SCALAR_TYPES.get(int(t.scalar_type), ("", 4))[1]
    for s in t.sizes:
        n *= s
    return n


def _where(t: schema.Tensor) -> tuple[int, int] | None:
    a = t.allocation_info
    if a is None:
        return None
    return a.memory_id, (a.memory_offset_high << 32) | a.memory_offset_low


# ExecuTorch's own custom-op namespaces, and the module whose import registers their schemas (a
# process reading a `.pte` — `inspect`, the verifier — may not have imported them).
_OP_LIBRARIES = {"llama": "executorch.extension.llm.custom_ops.custom_ops"}


def _register_namespace(ns: str) -> None:
    module = _OP_LIBRARIES.get(ns)
    if module is None:
        return
    import importlib
    try:
        importlib.import_module(module)
    except Exception:  # noqa: BLE001 - unavailable: the schema-less fallback applies
        pass


# ops ExecuTorch's emitter inserts without a torch schema -> the argument positions their
# kernels write (prim_ops: `et_copy_index(copy_to, element, index)` writes row `index` of
# `copy_to` — a `map`/`scan` body's result stacked into the op's output, one row per iteration)
_EMITTED = {"executorch_prim::et_copy_index": [0]}


def written_args(op: schema.Operator, n_args: int) -> list[int]:
    """Argument positions a kernel writes, from its schema's alias annotations (`Tensor(a!)`);
    an op torch does not know: the out variant's last argument, or an in-place op's first."""
    return [k for k, _ in _writes(op, n_args)]


def in_place_args(op: schema.Operator, n_args: int) -> list[int]:
    """Argument positions a kernel updates in place — an input its schema marks `Tensor(a!)`,
    not its `out=` argument — of an op that is not a copy (`COPY_OPS`): such a kernel may write
    part of the tensor (`llama::update_cache` writes T positions of its cache, `index_put_` the
    rows it indexes) and leaves the rest as it was; an out argument, or a copy's destination,
    is written whole."""
    if op.name in COPY_OPS:
        return []
    return [k for k, out in _writes(op, n_args) if not out]


def _writes(op: schema.Operator, n_args: int) -> list[tuple[int, bool]]:
    """(position, is an out= argument) of each argument the kernel writes."""
    import torch
    if op.name in _EMITTED:
        return [(k, False) for k in _EMITTED[op.name]]
    ns, _, name = op.name.partition("::")
    _register_namespace(ns)
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        overload = getattr(packet, op.overload or "default")
        args = overload._schema.arguments
    except (AttributeError, RuntimeError):
        if op.overload == "out":
            return [(n_args - 1, True)]
        return [(0, False)] if name.endswith("_") else []
    return [(k, a.kwarg_only) for k, a in enumerate(args) if k < n_args
            and a.alias_info is not None and a.alias_info.is_write]


def mutable_buffers(plan: schema.ExecutionPlan) -> dict[str, tuple[int, schema.Tensor]]:
    """FQN -> (value index, tensor) for the plan's named mutable buffers."""
    out = {}
    for i, v in enumerate(plan.values):
        t = v.val
        if isinstance(t, schema.Tensor) and t.extra_tensor_info is not None \
                and t.extra_tensor_info.fully_qualified_name:
            out.setdefault(t.extra_tensor_info.fully_qualified_name, (i, t))
    return out


def program_copy_bytes(pte: bytes, method: str = "forward") -> dict[str, int]:
    """FQN -> bytes the emitted program copies into or out of that buffer per call."""
    return {f: sum(paths.values()) for f, paths in program_copy_paths(pte, method).items()}


def flatbuffer_program(pte: bytes) -> schema.Program:
    """The `Program` of a `.pte` — or of its program flatbuffer alone (`pte_check.
    read_pte_program`): segments (engines, weights) are not read."""
    from executorch.exir._serialize._program import _flatbuffer_to_program, _get_extended_header
    eh = _get_extended_header(pte)
    size = eh.program_size if eh is not None and eh.is_valid() else len(pte)
    return _flatbuffer_to_program(pte[:size])


def program_copy_paths(pte: bytes, method: str = "forward") -> dict[str, dict[str, int]]:
    """FQN -> {"link": bytes, "host": bytes} the emitted program copies per call, by path."""
    program = flatbuffer_program(pte)
    return plan_copy_paths(next(p for p in program.execution_plan if p.name == method))


def plan_copy_paths(plan: schema.ExecutionPlan) -> dict[str, dict[str, int]]:
    """`program_copy_paths` of one parsed execution plan."""
    buffers = mutable_buffers(plan)
    loc = {fqn: _where(t) for fqn, (_, t) in buffers.items()}
    by_value = {i: fqn for fqn, (i, _) in buffers.items()}
    by_loc = {w: fqn for fqn, w in loc.items() if w is not None}
    counts = {fqn: {"link": 0, "host": 0} for fqn in buffers}
    fetched: dict[int, int] = {}   # value index -> bytes a device-to-host copy wrote into it
    for chain in plan.chains:
        for ins in chain.instructions:
            call = ins.instr_args
            if not isinstance(call, schema.KernelCall):
                continue
            name = plan.operators[call.op_index].name
            if name not in COPY_OPS:
                continue
            touched = set()
            for a in call.args:
                val = plan.values[a].val
                fqn = by_value.get(a)
                if fqn is None and isinstance(val, schema.Tensor):
                    fqn = by_loc.get(_where(val))
                if fqn is not None:
                    touched.add(fqn)
            path = "link" if name in LINK_OPS else "host"
            for fqn in touched:
                counts[fqn][path] += nbytes(buffers[fqn][1])
            if name == "et_copy::_d2h_copy" and not touched:   # into a temporary (its out arg)
                out = call.args[-1]
                if isinstance(plan.values[out].val, schema.Tensor):
                    fetched[out] = nbytes(plan.values[out].val)
            elif touched and name != "et_copy::_d2h_copy":
                # a write-back from a temporary a device-to-host copy filled: that fetch is this
                # buffer's traffic too (the new value crossed the link to reach the host kernel)
                for a in call.args:
                    for fqn in touched:
                        if a in fetched and by_value.get(a) is None:
                            counts[fqn]["link"] += fetched[a]
    return counts
