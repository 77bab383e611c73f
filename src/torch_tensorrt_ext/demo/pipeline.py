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
import logging
import os
import sys
import warnings
from typing import Iterator

import torch

ENGINES = ("reference", "tensorrt-rtx", "tensorrt")


class EngineUnavailable(ValueError):
    """The chosen engine kind cannot be built or run here; the message says why."""


@contextlib.contextmanager
def _quiet_fd2() -> Iterator[None]:
    """Hide what C++ libraries print to stderr while torch_tensorrt imports (device probes)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*meaningless initial state.*")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*was assigned during export.*")
        levels = {}
        for name in ("torch_tensorrt", "torch.utils._pytree", "torch._library", "torch._export",
                     "torch.export", "torch._opaque_base"):
            logger = logging.getLogger(name)
            levels[name] = logger.level
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)


def torch_tensorrt_module():
    """The installed torch_tensorrt with this project's series applied, imported quietly."""
    with quiet(), _quiet_fd2():
        try:
            import torch_tensorrt
        except Exception as e:  # noqa: BLE001 - reported to the user
            raise EngineUnavailable(f"torch_tensorrt does not import: {type(e).__name__}: {e}")
    from torch_tensorrt.dynamo import _compiler
    if "torch_tensorrt_ext.seams" not in open(_compiler.__file__).read():
        raise EngineUnavailable("torch_tensorrt is installed without this project's patch "
                                "series; run `torch-tensorrt-ext patch apply`")
    return torch_tensorrt


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
            raise EngineUnavailable("--engine tensorrt: TensorRT engines run on a CUDA GPU and this "
                                    "machine has none; use --engine reference (runs on CPU) or "
                                    "--engine tensorrt-rtx (builds the engines ahead of time)")
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
