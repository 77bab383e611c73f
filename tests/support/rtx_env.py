"""Real TensorRT-RTX conversion on this CPU machine, through the patched `torch_tensorrt`.

`torch_tensorrt_or_skip()` imports the installed torch-tensorrt(-rtx) 2.14.0 with this project's
series applied (skips, saying why, when it is absent or unpatched); `compile_rtx` is what a model
author calls; `recorded_aliasing` reads what the converters recorded for the built engines —
never the plan — so tests can compare the two.
"""
from __future__ import annotations

import functools
import operator

import pytest
import torch


@functools.lru_cache(maxsize=1)
def _import():
    from torch_tensorrt_ext.upstream_api import UpstreamUnavailable, torch_tensorrt_module
    try:
        return torch_tensorrt_module(), ""
    except UpstreamUnavailable as e:
        return None, str(e)


def torch_tensorrt_or_skip():
    mod, why = _import()
    if mod is None:
        pytest.skip(why)
    return mod


def compile_rtx(program, args, **settings):
    """`torch_tensorrt.compile` as a model author calls it (engines built ahead of time here)."""
    torch_tensorrt = torch_tensorrt_or_skip()
    if isinstance(program, torch.nn.Module):
        program = torch.export.export(program.eval(), tuple(args))
    settings.setdefault("min_block_size", 1)
    return torch_tensorrt.compile(program, ir="dynamo", arg_inputs=list(args), **settings)


def engine_modules(trt_gm) -> dict[str, torch.nn.Module]:
    return {n: m for n, m in trt_gm.named_children() if hasattr(m, "aliased_io")}


def recorded_aliasing(trt_gm) -> dict[str, tuple[str, str, str]]:
    """Buffer FQN -> (engine, output binding, input binding) for every aliased output the
    converters recorded, resolved through the graph (the engine call's argument is a get_attr
    of that buffer)."""
    modules = engine_modules(trt_gm)
    out = {}
    for call in trt_gm.graph.nodes:
        if call.op != "call_module" or call.target not in modules:
            continue
        m = modules[call.target]
        for o, (i, _kind) in (m.aliased_io or {}).items():
            arg = call.args[list(m.input_binding_names).index(i)]
            assert arg.op == "get_attr", f"{call.target}: {i} is fed by {arg.op} {arg.name}"
            out[str(arg.target)] = (str(call.target), o, i)
    return out


def getitem_users(node) -> dict[int, torch.fx.Node]:
    return {u.args[1]: u for u in node.users if u.target is operator.getitem}


def built_engine_kind() -> str:
    """The TR03 engine kind of the engines this machine builds: `tensorrt_rtx` with
    torch-tensorrt-rtx (CPU CI), `tensorrt` with torch-tensorrt (GPU runners)."""
    torch_tensorrt = torch_tensorrt_or_skip()
    return "tensorrt_rtx" if torch_tensorrt.ENABLED_FEATURES.tensorrt_rtx else "tensorrt"


def save_rtx_pte(model, args, path, **save_options) -> None:
    """`model` compiled with TensorRT-RTX engines (ahead of time) and saved as a `.pte` at `path`
    through `torch_tensorrt.save`, as a model author does."""
    torch_tensorrt = torch_tensorrt_or_skip()
    trt = compile_rtx(model, args)
    torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=list(args),
                        **save_options)


def rtx_programs(model, args, methods) -> dict:
    """`model` compiled once with TensorRT-RTX engines (ahead of time), exported as each of
    `methods` — the same engines, so the same plans — for a multi-method `.pte`."""
    torch_tensorrt = torch_tensorrt_or_skip()
    from torch_tensorrt.dynamo._exporter import _declare_aliased_kv_mutations_on_ep
    trt = compile_rtx(model, args)
    return {m: _declare_aliased_kv_mutations_on_ep(
        torch_tensorrt.dynamo.export(trt, arg_inputs=list(args))) for m in methods}
