"""The declared programs as ExecuTorch's lowering receives them (patch 0004 calls this first).

Invariant: what `prepare_programs` returns has every value the emitter reads in host memory
(`host_values`), no call `engines.prims_to_aten` rewrites (prims, torch-tensorrt's `_reshape_copy`)
and no call `engines.kernel_forms` rewrites left in the part of the program PyTorch runs (the
rewrites an engine's partition gets, here on a copy of the graph: the caller's program is
unchanged) and every copy-back write a TensorRT delegate
can copy itself handed to that delegate (`delegate_copies`); a program needing none of these is
returned as it is. A program with an engine call whose results nothing reads is refused
(`Unsupported`, naming the engine and the buffers it writes): ExecuTorch's lowering would drop the
call (its passes know no engine's side effects) or fail lowering a delegate without outputs —
either way the write would not be saved.
"""
from __future__ import annotations

import operator
from collections.abc import Mapping

import copy

from torch.export import ExportedProgram
from torch.export.graph_signature import OutputSpec, TensorArgument

from ...engines.kernel_forms import has_kernel_forms, kernel_forms
from ...engines.prims_to_aten import has_prims, prims_to_aten
from ...errors import Unsupported
from ...export.engine_calls import engine_calls
from ...lowering.program_edit import rebuilt
from .delegate_copies import Programs, hand_copy_backs_to_delegates
from .host_values import host_values

__all__ = ["prepare_programs"]


def prepare_programs(programs: Programs) -> Programs:
    for name, ep in (programs.items() if isinstance(programs, Mapping) else [("", programs)]):
        _refuse_engines_nothing_reads(ep, name)
    programs = host_values(programs)
    programs = {n: _host_aten(p) for n, p in programs.items()} \
        if isinstance(programs, Mapping) else _host_aten(programs)
    return hand_copy_backs_to_delegates(programs)


def _host_aten(ep: ExportedProgram) -> ExportedProgram:
    """`ep` with the prims (and `_reshape_copy`) calls of its host part rewritten as ATen
    (`prims_to_aten`: train-mode BatchNorm, a `view` in a partition left to PyTorch), then the
    calls ExecuTorch's kernels compute otherwise than ATen in the forms they compute like it
    (`kernel_forms`, as in an engine's payload: the host part runs on the same kernels — a 0-d
    half-precision product with a float came back fp32 and the next delegate refused it);
    engines are opaque calls here, so only the host part changes."""
    if not has_prims(ep.graph_module) and not has_kernel_forms(ep.graph_module):
        return ep
    gm = copy.deepcopy(ep.graph_module)
    prims_to_aten(gm)
    kernel_forms(gm)
    outputs = gm.graph.output_node().args[0]
    specs = [OutputSpec(s.kind, TensorArgument(v.name), s.target)
             if isinstance(s.arg, TensorArgument) else s
             for s, v in zip(ep.graph_signature.output_specs, outputs, strict=True)]
    return rebuilt(ep, graph_module=gm, output_specs=specs)


def _refuse_engines_nothing_reads(ep: ExportedProgram, method: str) -> None:
    buffers = ep.graph_signature.inputs_to_buffers
    for call in engine_calls(ep).values():
        if any(u.target is not operator.getitem or u.users for u in call.node.users):
            continue
        written = sorted(buffers.get(getattr(call.argument(a.input), "name", ""), a.input)
                         for a in call.info.aliased_io)
        where = f" (method {method!r})" if method else ""
        raise Unsupported(
            f"engine {call.name!r}{where} writes {written or 'nothing'} in place and hands the "
            "program nothing it reads: ExecuTorch's lowering would drop the call or fail on a "
            "delegate without outputs. Use what the engine writes after the write in the same "
            "part of the model (as attention reads the cache it updated), or let PyTorch run "
            "the write (torch_executed_ops)")
