"""`tte.reference`: the CPU stand-in for `torch_tensorrt.compile` + `save(output_format="executorch")`.

Invariant: `export(model, example_args, path)` writes a `.pte` whose every call updates the
model's buffers exactly as eager PyTorch would (KV writes in place through the delegate's input,
copy-back writes copied once), starting from the buffers' registered initial values. It is the
same pipeline a GPU runner takes with TensorRT engines, cut at the engine interface.
"""
from __future__ import annotations

import copy
from typing import Iterable, Mapping, Sequence, Union

import torch

from .engines.reference_compiler import CompiledModule, compile  # noqa: A004
from .export.declare import declare_mutations
from .lowering import plan_mutations
from .lowering.graph_writes import functional_program

__all__ = ["CompiledModule", "compile", "export", "export_methods", "export_program"]


def _exported(model: torch.nn.Module, args: Sequence[torch.Tensor]) -> torch.export.ExportedProgram:
    return torch.export.export(copy.deepcopy(model).eval(), tuple(args))


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


def export_program(model: torch.nn.Module, example_args: Sequence[torch.Tensor], *,
                   torch_executed_ops: Iterable[object] = (), shared_state: Iterable[str] = ()):
    """(declared ExportedProgram of the compiled module, CompiledModule). `shared_state`: buffers
    other methods write (see `compile`)."""
    _check_state_expressible(model, example_args)
    return _compile_and_declare(_exported(model, example_args), example_args,
                                torch_executed_ops, shared_state)


def _compile_and_declare(program: torch.export.ExportedProgram, example_args,
                         torch_executed_ops: Iterable[object], shared_state: Iterable[str]):
    compiled = compile(program, torch_executed_ops=torch_executed_ops, shared_state=shared_state)
    # torch 2.14 keeps the graph-level copy_ of writes made outside engines in place:
    # functionalize so they become BUFFER_MUTATIONs (ExecuTorch's write-back), then declare the rest
    ep = functional_program(torch.export.export(compiled.gm, tuple(example_args)))
    return declare_mutations(ep, compiled.plan, compiled.engines), compiled


def export_methods(methods: Mapping[str, tuple], *, torch_executed_ops: Iterable[object] = ()):
    """`{method: (module, args)}` -> `{method: declared ExportedProgram}`; a buffer any method
    writes is live state in every method that reads it. Each method is exported once."""
    for m, a in methods.values():
        _check_state_expressible(m, a)
    exported = {name: _exported(m, a) for name, (m, a) in methods.items()}
    written = set()
    for program in exported.values():
        written |= set(plan_mutations(program).fqns)
    return {name: _compile_and_declare(exported[name], methods[name][1], torch_executed_ops,
                                       written)[0]
            for name in methods}


def export(model: Union[torch.nn.Module, Mapping[str, tuple]], example_args=None, path=None, *,
           torch_executed_ops: Iterable[object] = (), share_mutable_buffers: bool = False):
    """export → reference compile → declare → lower → `.pte` at `path`; returns the path.

    For several methods pass `model` and `example_args` as `{method: (module, args)}` in
    `model` (with `example_args=None`); methods share buffers with `share_mutable_buffers=True`.
    """
    from .executorch.lower import save_pte
    if isinstance(model, Mapping):
        if path is None:
            path = example_args
        programs = export_methods(model, torch_executed_ops=torch_executed_ops)
        return save_pte(programs, str(path), share_mutable_buffers=share_mutable_buffers)
    ep, _ = export_program(model, example_args, torch_executed_ops=torch_executed_ops)
    return save_pte(ep, str(path), share_mutable_buffers=share_mutable_buffers)
