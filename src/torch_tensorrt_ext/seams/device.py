"""Ahead-of-time engine builds without a GPU (TensorRT-RTX on a CPU machine).

Invariant: with a CUDA device present every function answers exactly what `torch.cuda` (and
the engine API) answers — nothing changes on a GPU machine. Without one, torch-tensorrt is
answered from the configured target instead of querying a device that is not there: the target
compute capability comes from `TTE_TARGET_COMPUTE_CAPABILITY` ("MAJOR.MINOR", default
`DEFAULT_TARGET`), engines stay serialized (never deserialized, never set up), their aliasing
is the converters' record, and running one raises `NoDeviceError` naming the engine.
"""
from __future__ import annotations

import os

import torch

from ..errors import TteError, UsageError

ENV_TARGET = "TTE_TARGET_COMPUTE_CAPABILITY"
DEFAULT_TARGET = (8, 6)
AOT_DEVICE_NAME = "ahead-of-time target (no CUDA device at build time)"


class NoDeviceError(TteError, RuntimeError):
    """A TensorRT engine built ahead of time is run on a machine without a CUDA device."""


def has_cuda() -> bool:
    return torch.cuda.is_available()


def target_capability() -> tuple[int, int]:
    """The compute capability engines are built for: the device's, else the configured one."""
    if has_cuda():
        return tuple(torch.cuda.get_device_capability())  # type: ignore[return-value]
    raw = os.environ.get(ENV_TARGET, "")
    if not raw:
        return DEFAULT_TARGET
    try:
        major, minor = (int(p) for p in raw.split("."))
    except ValueError:
        raise UsageError(f"{ENV_TARGET}={raw!r}: expected MAJOR.MINOR, e.g. 8.6") from None
    return major, minor


def example_device(device: torch.device) -> torch.device:
    """Where example inputs to trace with go: `device`, or host memory for a CUDA device on a
    machine without one (an ahead-of-time build or a reference-engine compile traces on the
    host; nothing runs on a device there)."""
    if device.type == "cuda" and not has_cuda():
        return torch.device("cpu")
    return device


def current_device() -> int:
    return torch.cuda.current_device() if has_cuda() else 0


def device_properties(gpu_id: int):
    """`torch.cuda.get_device_properties`, or the configured target's (major, minor, name)."""
    if has_cuda():
        return torch.cuda.get_device_properties(gpu_id)
    major, minor = target_capability()
    return _TargetProperties(major, minor, AOT_DEVICE_NAME)


class _TargetProperties:
    def __init__(self, major: int, minor: int, name: str):
        self.major, self.minor, self.name = major, minor, name


def mem_get_info() -> tuple[int, int] | None:
    """(free, total) device memory, or None when there is no device to ask."""
    return torch.cuda.mem_get_info() if has_cuda() else None


class SerializedEngine:
    """A built engine kept serialized: what the interpreter needs of an `ICudaEngine` when there
    is no device to deserialize it on. `get_aliased_input_tensor` cannot be asked of TensorRT
    without a device, so it reports nothing and the converters' records stand."""

    def __init__(self, serialized):
        self._bytes = bytes(serialized)

    def serialize(self) -> bytes:
        return self._bytes

    def get_aliased_input_tensor(self, name: str) -> str | None:
        return None

    def __len__(self) -> int:
        return len(self._bytes)


def deserialize_or_keep(runtime_factory, serialized):
    """Deserialize a freshly built engine where a device exists; keep it serialized otherwise."""
    if not has_cuda():
        return SerializedEngine(serialized)
    return runtime_factory().deserialize_cuda_engine(serialized)


def require_device(engine_name: str) -> None:
    """Raise `NoDeviceError` when `engine_name` is about to be set up or run without a device."""
    if not has_cuda():
        raise NoDeviceError(
            f"TensorRT engine {engine_name!r} was built ahead of time and needs a CUDA device to "
            "run; this machine has none. Save it (torch_tensorrt.save) and run it on a GPU "
            "machine, or compile with reference engines (torch_tensorrt_ext.reference.engines()) "
            "to run on CPU.")
