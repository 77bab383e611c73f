"""The save matrix of `torch_tensorrt.save` and what each saved artifact must say about state.

A cell is (source, retrace, use_legacy_exporter, output_format): `source` "gm" saves the module
`torch_tensorrt.compile` returned, "ep" saves an ExportedProgram of it (retrace and the exporter
do not apply). `check_*` assert, from the artifact alone, that every buffer the reconciled plan
names is declared exactly once by FQN — a KV write on the buffer itself, a copy-back write on
its value — and, for `.pte`, the copy ops, initial values, blob aliasing and engine bytes.
"""
from __future__ import annotations

import collections
import copy
import functools
import itertools
from typing import NamedTuple

import torch
from e2e_models import MODELS
from rtx_env import built_engine_kind, compile_rtx, torch_tensorrt_or_skip
from torch.export.graph_signature import OutputKind

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte

FORMATS = ("exported_program", "executorch", "aot_inductor")


class Cell(NamedTuple):
    source: str
    retrace: bool | None
    legacy: bool | None
    fmt: str

    @property
    def id(self) -> str:
        if self.source == "ep":
            return f"ep-{self.fmt}"
        return f"gm-retrace{int(self.retrace)}-legacy{self.legacy}-{self.fmt}"


CELLS = [Cell("gm", r, lg, f) for r, lg, f in itertools.product((True, False),
                                                                  (None, True, False), FORMATS)]
CELLS += [Cell("ep", None, None, f) for f in FORMATS]


def declared(ep: torch.export.ExportedProgram) -> dict[str, str]:
    """FQN -> "in_place" (declared on the buffer's own placeholder) or "value", asserting each
    buffer is declared once."""
    sig = ep.graph_signature
    targets = [s.target for s in sig.output_specs if s.kind == OutputKind.BUFFER_MUTATION]
    twice = [f for f, n in collections.Counter(targets).items() if n > 1]
    assert not twice, f"declared more than once: {twice}"
    placeholder = {fqn: name for name, fqn in sig.inputs_to_buffers.items()}
    return {s.target: ("in_place" if s.arg.name == placeholder[s.target] else "value")
            for s in sig.output_specs if s.kind == OutputKind.BUFFER_MUTATION}


def expected_declarations(plan) -> dict[str, str]:
    return {w.fqn: ("in_place" if w.is_kv else "value") for w in plan}


def check_pte(data: bytes, plan, nbytes: dict[str, int], method: str = "forward") -> None:
    info = inspect_pte(data).method(method)
    buffers = {b.fqn: b for b in info.buffers}
    assert set(buffers) == set(plan.fqns), (sorted(buffers), plan.fqns)
    for w in plan:
        b = buffers[w.fqn]
        assert b.kind == ("kv_alias" if w.is_kv else "copy_back"), (w.fqn, b)
        # a KV buffer is written in place and a copy-back buffer is copied into by the
        # delegate itself (one device copy): the program copies neither, and both live in the
        # delegate's device memory
        assert (b.program_copy_bytes, b.program_link_bytes, b.device, b.host_path) == \
            (0, 0, "cuda:0", ""), (w.fqn, b)
        assert b.initial_value, f"{w.fqn} carries no initial value"
    trt = [d for d in info.delegates if d.backend == "TensorRTBackend"]
    kind = built_engine_kind()
    # each engine's plan is the program's named data (blob version 5), none inline
    assert trt and all(d.magic == "TR03" and d.engine_kind == kind and d.engine_bytes == 0
                       and d.plan is not None and d.plan[1] > 0 for d in trt), trt
    aliased = {f for d in trt for i, f in d.buffers if i in {inp for _, inp in d.aliased_io}}
    assert aliased == {w.fqn for w in plan.kv()}
    copied = {f for d in trt for i, f in d.buffers if i in {inp for _, inp in d.copy_back}}
    assert copied == {w.fqn for w in plan.copy_back()}


@functools.cache
def compiled(name):
    """(eager model, example args, plan_mutations of its export, TensorRT-RTX compiled module),
    compiled once per test session."""
    factory, args_of, _ = MODELS[name]
    model = factory().eval()
    ep = torch.export.export(copy.deepcopy(model), args_of(0))
    return model, args_of(0), tte.plan_mutations(ep), compile_rtx(ep, args_of(0))


def nbytes(model) -> dict[str, int]:
    return {n: b.numel() * b.element_size() for n, b in model.named_buffers()}


SAVE_MODELS = ("kv_index_copy", "kv_slice_scatter", "kv_write_only", "nested_three_deep",
               "ring_buffer", "counter", "strided_write", "write_twice", "two_submodules",
               "reads_old_cache_after_write", "gated_deltanet_states")


@functools.cache
def reference_compiled(name):
    torch_tensorrt = torch_tensorrt_or_skip()
    factory, args_of, _ = MODELS[name]
    model = factory().eval()
    ep = torch.export.export(copy.deepcopy(model), args_of(0))
    with tte.reference.engines():
        trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(args_of(0)),
                                     min_block_size=1)
    return model, trt
