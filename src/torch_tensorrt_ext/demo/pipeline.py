"""What a model author does, for the demo: torch.export → torch_tensorrt.compile →
torch_tensorrt.save(output_format="executorch"), with the engine kind the user chose.

Invariant: the demo reaches engines only through the patched upstream API; `check_engine`
refuses, before anything is exported, an engine kind this machine cannot build (or, for
"tensorrt", run) with a message saying why and what to use; third-party noise a user cannot act
on (import-time device probes, ExecuTorch's "meaningless initial state" warning — our programs
carry initial values) is not shown, and every step says what it is doing on stderr.
"""
from __future__ import annotations

import contextlib
import copy

import torch

from ..errors import TteError
from ..upstream_api import UpstreamUnavailable, quiet
from ..upstream_api import torch_tensorrt_module as _torch_tensorrt

ENGINES = ("reference", "tensorrt-rtx", "tensorrt")


class EngineUnavailable(TteError, ValueError):
    """The chosen engine kind cannot be built or run here; the message says why."""


def torch_tensorrt_module():
    try:
        return _torch_tensorrt()
    except UpstreamUnavailable as e:
        raise EngineUnavailable(str(e)) from None


def check_engine(engine: str):
    """The torch_tensorrt module to use for `engine`, or `EngineUnavailable` saying why not."""
    if engine not in ENGINES:
        raise EngineUnavailable(f"--engine {engine}: choose one of {', '.join(ENGINES)}")
    torch_tensorrt = torch_tensorrt_module()
    rtx = torch_tensorrt.ENABLED_FEATURES.tensorrt_rtx
    if engine == "tensorrt-rtx" and not rtx:
        raise EngineUnavailable("--engine tensorrt-rtx: the installed torch_tensorrt is not the "
                                "TensorRT-RTX build (pip install torch-tensorrt-rtx==2.14.0)")
    if engine == "tensorrt":
        if not torch.cuda.is_available():
            raise EngineUnavailable("--engine tensorrt: TensorRT engines run on a CUDA GPU and "
                                    "this machine has none; use --engine reference (runs on CPU) "
                                    "or --engine tensorrt-rtx (builds the engines ahead of time)")
        if rtx and torch.cuda.get_device_capability() == (9, 0):
            raise EngineUnavailable("--engine tensorrt: this torch_tensorrt is TensorRT-RTX, whose "
                                    "runtime refuses compute capability 9.0")
    return torch_tensorrt


def compile_and_save(torch_tensorrt, model: torch.nn.Module, args: tuple, path: str,
                     engine: str, say=print):
    """The compiled module; the `.pte` is written to `path`."""
    from .. import reference
    device = "cuda" if engine == "tensorrt" else "cpu"
    model = copy.deepcopy(model).to(device)
    args = tuple(a.to(device) for a in args)
    with quiet():
        say("exporting the decoder (torch.export.export) ...")
        ep = torch.export.export(model, args)
        kind = {"reference": "CPU reference engines", "tensorrt-rtx":
                "TensorRT-RTX engines, built ahead of time", "tensorrt": "TensorRT engines"}[engine]
        say(f"compiling with {kind} (torch_tensorrt.compile) ...")
        with reference.engines() if engine == "reference" else contextlib.nullcontext():
            trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(args), min_block_size=1)
        say(f"saving {path} (torch_tensorrt.save, output_format='executorch') ...")
        torch_tensorrt.save(trt, path, output_format="executorch", arg_inputs=list(args))
    return trt
