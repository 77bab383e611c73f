"""`tte.reference`: the CPU stand-in for `torch_tensorrt.compile` + `save(output_format="executorch")`.

Invariant: `export(model, example_args, path)` writes a `.pte` whose every call updates the
model's buffers exactly as eager PyTorch would (KV writes in place through the delegate's input,
copy-back writes copied once), starting from the buffers' registered initial values. It is the
same pipeline a GPU runner takes with TensorRT engines, cut at the engine interface.
"""
from __future__ import annotations

import copy
import os
from typing import Iterable, Mapping, Optional, Sequence, Union

import torch

from .engines.reference_compiler import CompiledModule, compile  # noqa: A004
from .export.declare import declare_mutations
from .lowering import plan_mutations
from .lowering.graph_writes import functional_program

__all__ = ["CompiledModule", "compile", "export", "export_methods", "export_program"]


Model = Union[torch.nn.Module, torch.export.ExportedProgram]


def _exported(model: Model, args: Sequence[object], strict: bool = False
              ) -> torch.export.ExportedProgram:
    """An ExportedProgram as given (any export mode), or the module exported (`strict` chooses
    torch.export's mode)."""
    if isinstance(model, torch.export.ExportedProgram):
        return model
    return torch.export.export(copy.deepcopy(model).eval(), tuple(args), strict=strict)


def _user_args(model: Model, args) -> tuple:
    """The flat user inputs the compiled program takes: `args` as given, or for an
    ExportedProgram without them its recorded example inputs (positional and keyword, flattened
    in the program's input order)."""
    if args is not None:
        return tuple(args)
    if isinstance(model, torch.export.ExportedProgram) and model.example_inputs is not None:
        return tuple(torch.utils._pytree.tree_leaves(model.example_inputs))
    raise ValueError("example_args are needed: pass them, or an ExportedProgram that recorded "
                     "its example inputs")


def _check_module(model: Model, args) -> None:
    if isinstance(model, torch.nn.Module):
        _check_state_expressible(model, args)


def _check_state_expressible(model: torch.nn.Module, args) -> None:
    """A buffer whose shape or dtype changes in forward has no fixed memory to alias or copy to."""
    probe = copy.deepcopy(model)
    before = {n: (b.shape, b.dtype) for n, b in probe.named_buffers()}
    with torch.no_grad():
        probe(*copy.deepcopy(tuple(args)))
    after = dict(probe.named_buffers())
    for name, (shape, dtype) in before.items():
        b = after.get(name)
        if b is None:
            raise ValueError(f"buffer {name!r} is deleted in forward; exported state needs every "
                             "buffer to persist")
        if b.shape != shape or b.dtype != dtype:
            raise ValueError(f"buffer {name!r} changes from {dtype} {list(shape)} to {b.dtype} "
                             f"{list(b.shape)} in forward; exported state needs fixed shapes "
                             "(preallocate it at its maximum size)")


def export_program(model: Model, example_args: Optional[Sequence[object]] = None, *,
                   torch_executed_ops: Iterable[object] = (), shared_state: Iterable[str] = (),
                   strict: bool = False):
    """(declared ExportedProgram of the compiled module, CompiledModule). `model` is a module
    (exported here, `strict` choosing the mode) or an ExportedProgram from any export mode
    (`example_args` then default to its recorded example inputs). `shared_state`: buffers other
    methods write (see `compile`)."""
    _check_module(model, example_args)
    program = _exported(model, example_args, strict)
    args = _user_args(program, example_args)
    return _compile_and_declare(program, args, torch_executed_ops, shared_state)


def _compile_and_declare(program: torch.export.ExportedProgram, example_args,
                         torch_executed_ops: Iterable[object], shared_state: Iterable[str]):
    compiled = compile(program, torch_executed_ops=torch_executed_ops, shared_state=shared_state)
    # torch 2.14 keeps the graph-level copy_ of writes made outside engines in place:
    # functionalize so they become BUFFER_MUTATIONs (ExecuTorch's write-back), then declare the rest
    ep = functional_program(torch.export.export(compiled.gm, tuple(example_args)))
    return declare_mutations(ep, compiled.plan, compiled.engines), compiled


def export_methods(methods: Mapping[str, tuple], *, torch_executed_ops: Iterable[object] = (),
                   strict: bool = False):
    """`{method: (module or ExportedProgram, args or None)}` -> `{method: declared
    ExportedProgram}`; a buffer any method writes is live state in every method that reads it.
    Each method is exported once."""
    for m, a in methods.values():
        _check_module(m, a)
    exported = {name: _exported(m, a, strict) for name, (m, a) in methods.items()}
    written = set()
    for program in exported.values():
        written |= set(plan_mutations(program).fqns)
    return {name: _compile_and_declare(exported[name], _user_args(exported[name], methods[name][1]),
                                       torch_executed_ops, written)[0]
            for name in methods}


def export(model: Union[Model, Mapping[str, tuple]], example_args=None, path=None, *,
           torch_executed_ops: Iterable[object] = (), share_mutable_buffers: bool = False,
           strict: bool = False):
    """export → reference compile → declare → lower → `.pte` at `path`; returns the path.

    `model` is a module (exported here in `strict` mode or not) or an ExportedProgram from any
    export mode; for an ExportedProgram `example_args` may be None (its recorded example inputs
    are used) and the path may be passed second. For several methods pass
    `{method: (module or ExportedProgram, args)}` as `model` (with the path second); methods
    share buffers with `share_mutable_buffers=True`.
    """
    from .executorch.lower import save_pte
    if isinstance(model, Mapping):
        if path is None:
            path = example_args
        programs = export_methods(model, torch_executed_ops=torch_executed_ops, strict=strict)
        return save_pte(programs, str(path), share_mutable_buffers=share_mutable_buffers)
    if (path is None and isinstance(model, torch.export.ExportedProgram)
            and isinstance(example_args, (str, os.PathLike))):
        example_args, path = None, example_args
    ep, _ = export_program(model, example_args, torch_executed_ops=torch_executed_ops,
                           strict=strict)
    return save_pte(ep, str(path), share_mutable_buffers=share_mutable_buffers)


def engines():
    """Context manager: `torch_tensorrt.compile` inside it builds CPU reference engines (same
    partitions and aliased I/O as TensorRT), and `torch_tensorrt.save(..., "executorch")` writes
    a `.pte` this project's runtime runs on CPU. See `torch_tensorrt_ext.seams.engines`."""
    from .seams.engines import reference_engines
    return reference_engines()
