"""`tte.reference`: CPU reference engines behind the patched `torch_tensorrt.compile` / `save`.

Invariant: there is one pipeline. `engines()` makes torch-tensorrt's own compile build CPU
reference engines (the same partitions and aliased I/O as TensorRT); every function here is a
convenience over exactly what a model author writes —

    with tte.reference.engines():
        trt_gm = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(args))
    torch_tensorrt.save(trt_gm, "model.pte", output_format="executorch", arg_inputs=list(args))

— so a `.pte` written here updates the model's buffers on every call exactly as eager PyTorch
would (KV writes in place through the delegate's input, copy-back writes copied once),
starting from the buffers' registered initial values.
"""
from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping, Sequence

import torch

from .contracts.engine import EngineInfo
from .contracts.plan import MutationPlan
from .errors import UsageError

__all__ = ["CompiledModule", "compile", "engines", "export", "export_methods", "export_program"]

Model = torch.nn.Module | torch.export.ExportedProgram


def engines():
    """Context manager: `torch_tensorrt.compile` inside it builds CPU reference engines (same
    partitions and aliased I/O as TensorRT), and `torch_tensorrt.save(..., "executorch")` writes
    a `.pte` this project's runtime runs on CPU. See `torch_tensorrt_ext.seams.engine_kind`."""
    from .seams.engine_kind import reference_engines
    return reference_engines()


class CompiledModule(torch.nn.Module):
    """What `torch_tensorrt.compile` returned (`.gm`), its reconciled plan (`.plan`) and what each
    engine reports (`.engines`); calling it runs `.gm`."""

    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__()
        self.gm = gm
        self.plan: MutationPlan = gm.mutation_plan
        self.engines: tuple[EngineInfo, ...] = gm.engine_infos   # compile's record

    def forward(self, *args):
        return self.gm(*args)


def _op_overloads(ops: Iterable[object]) -> set:
    """torch_executed_ops as the OpOverloads torch-tensorrt's partitioner matches: a name such as
    "aten.index_copy.default" (or "torch.ops.aten.index_copy") resolved to its overload."""
    out = set()
    for op in ops or ():
        if isinstance(op, str):
            name = op[len("torch.ops."):] if op.startswith("torch.ops.") else op
            parts = name.split(".")
            resolved = getattr(getattr(torch.ops, parts[0]), parts[1])
            op = getattr(resolved, parts[2] if len(parts) > 2 else "default")
        out.add(op)
    return out


def _torch_tensorrt():
    from .upstream_api import torch_tensorrt_module
    return torch_tensorrt_module()


def _exported(model: Model, args: Sequence[object], strict: bool = False
              ) -> torch.export.ExportedProgram:
    """An ExportedProgram as given (any export mode), or the module exported (`strict` chooses
    torch.export's mode)."""
    if isinstance(model, torch.export.ExportedProgram):
        return model
    _check_state_expressible(model, args)
    traced = _state_copy(model).eval()
    versions = _versions(traced)
    ep = torch.export.export(traced, tuple(args), strict=strict)
    _undo_traced_writes(traced, model, versions)
    return ep


def _state_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` whose state (buffers, other tensors) is its own and whose parameters
    are `model`'s own objects: a trace or a probe call writes state, never weights, so the
    weights are not copied (a deep copy held a second copy of them through the whole save)."""
    return copy.deepcopy(model, {id(p): p for p in model.parameters()})


def _versions(module: torch.nn.Module) -> dict[str, int | None]:
    def version(t: torch.Tensor) -> int | None:
        try:
            return t._version
        except RuntimeError:      # an inference tensor keeps no version
            return None
    return {name: version(b) for name, b in module.named_buffers()}


def _undo_traced_writes(traced: torch.nn.Module, source: torch.nn.Module,
                        versions: dict[str, int | None]) -> None:
    """A non-strict trace writes a module's real buffers where the module writes them through
    another object holding them (transformers' cache layers): torch.export lifts that object's
    tensor as a constant (merged back into its buffer, lowering/mutated_inputs.py) and runs the
    write on it, so the program would start from the traced values. Each buffer of `traced` the
    trace wrote takes its value back from `source`, the module it was copied from."""
    with torch.no_grad():
        for name, after in _versions(traced).items():
            if after != versions[name]:
                traced.get_buffer(name).copy_(source.get_buffer(name))


def _user_args(model: Model, args) -> tuple:
    """The flat user inputs the compiled program takes: `args` as given, or for an
    ExportedProgram without them its recorded example inputs (positional and keyword, flattened
    in the program's input order)."""
    if args is not None:
        return tuple(args)
    if isinstance(model, torch.export.ExportedProgram) and model.example_inputs is not None:
        return tuple(torch.utils._pytree.tree_leaves(model.example_inputs))
    raise UsageError("example_args are needed: pass them, or an ExportedProgram that recorded "
                     "its example inputs")


def _check_state_expressible(model: torch.nn.Module, args) -> None:
    """A buffer whose shape or dtype changes in forward has no fixed memory to alias or copy to."""
    probe = _state_copy(model)
    before = {n: (b.shape, b.dtype) for n, b in probe.named_buffers()}
    with torch.no_grad():
        probe(*copy.deepcopy(tuple(args)))
    after = dict(probe.named_buffers())
    for name, (shape, dtype) in before.items():
        b = after.get(name)
        if b is None:
            raise UsageError(f"buffer {name!r} is deleted in forward; exported state needs every "
                             "buffer to persist")
        if b.shape != shape or b.dtype != dtype:
            raise UsageError(f"buffer {name!r} changes from {dtype} {list(shape)} to {b.dtype} "
                             f"{list(b.shape)} in forward; exported state needs fixed shapes "
                             "(preallocate it at its maximum size)")


def compile(model: Model, example_args: Sequence[object] | None = None, *,  # noqa: A001
            torch_executed_ops: Iterable[object] = (), strict: bool = False) -> CompiledModule:
    """`torch_tensorrt.compile` with reference engines (every buffer the program reads stays a
    live engine input: another method of the same module may write it)."""
    torch_tensorrt = _torch_tensorrt()
    args = _user_args(model, example_args)
    program = _exported(model, args, strict)
    with engines():
        gm = torch_tensorrt.compile(program, ir="dynamo", arg_inputs=list(args),
                                    min_block_size=1,
                                    torch_executed_ops=_op_overloads(torch_executed_ops))
    return CompiledModule(gm)


def _declared(compiled: CompiledModule, args) -> torch.export.ExportedProgram:
    """The ExportedProgram `torch_tensorrt.save` lowers, every mutation declared — retraced
    with the compiled module's own dynamic dimensions (bounded as it was compiled), so a
    dynamic-length program stays one."""
    from .engines.dynamic_dims import partition_dims
    from .seams.save_declaration import declare_program
    torch_tensorrt = _torch_tensorrt()
    inputs = [n for n in compiled.gm.graph.nodes if n.op == "placeholder"]
    spec = partition_dims(inputs).export_spec(compiled.gm)
    return declare_program(torch_tensorrt.dynamo.export(compiled.gm, arg_inputs=list(args),
                                                        dynamic_shapes=spec))


def export_program(model: Model, example_args: Sequence[object] | None = None, *,
                   torch_executed_ops: Iterable[object] = (), strict: bool = False):
    """(declared ExportedProgram of the compiled module, CompiledModule)."""
    args = _user_args(model, example_args)
    compiled = compile(model, args, torch_executed_ops=torch_executed_ops, strict=strict)
    return _declared(compiled, args), compiled


def export_methods(methods: Mapping[str, tuple], *, torch_executed_ops: Iterable[object] = (),
                   strict: bool = False):
    """`{method: (module or ExportedProgram, args or None)}` -> `{method: declared
    ExportedProgram}`; each method compiled on its own — a buffer it only reads stays live state
    (`compile`), so the save makes it one allocation with the method that writes it."""
    exported = {name: _exported(m, _user_args(m, a), strict) for name, (m, a) in methods.items()}
    return {name: export_program(exported[name], _user_args(exported[name], methods[name][1]),
                                 torch_executed_ops=torch_executed_ops)[0]
            for name in methods}


def _write(programs, path: str, share_mutable_buffers: bool | None) -> str:
    """torch-tensorrt's ExecuTorch lowering (what `torch_tensorrt.save` runs), written
    atomically."""
    from .executorch.saving.lower import save_pte
    return save_pte(programs, path, share_mutable_buffers=share_mutable_buffers)


def export(model: Model | Mapping[str, tuple], example_args=None, path=None, *,
           torch_executed_ops: Iterable[object] = (),
           share_mutable_buffers: bool | None = None, strict: bool = False):
    """`torch_tensorrt.compile` (reference engines) → save as `.pte` at `path`; returns the path.

    `model` is a module (exported here in `strict` mode or not) or an ExportedProgram from any
    export mode; for an ExportedProgram `example_args` may be None (its recorded example inputs
    are used) and the path may be passed second. For several methods pass
    `{method: (module or ExportedProgram, args)}` as `model` (with the path second): buffers one
    method writes and another uses share one allocation, as in eager (`share_mutable_buffers`
    None), or explicitly always (True) or never (False).
    """
    if isinstance(model, Mapping):
        if path is None:
            path = example_args
        programs = export_methods(model, torch_executed_ops=torch_executed_ops, strict=strict)
        return _write(programs, str(path), share_mutable_buffers)
    if (path is None and isinstance(model, torch.export.ExportedProgram)
            and isinstance(example_args, (str, os.PathLike))):
        example_args, path = None, example_args
    ep, _ = export_program(model, example_args, torch_executed_ops=torch_executed_ops,
                           strict=strict)
    return _write(ep, str(path), share_mutable_buffers)
