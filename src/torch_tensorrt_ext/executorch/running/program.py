"""`load(path)`: run a `.pte` with ExecuTorch's Module API and this project's delegate runtime.

Invariant: one loader — the runtime library's (`tte_program_*` of tte/c_api.h), the same the C++
runner uses. Every method is loaded at open, whatever the methods are called; `Program.run(*args)`
executes one call of a method (named, or the program's default: `method_choice`)
and mutable buffers persist across calls in the program's own memory, exactly as in an
ExecuTorch app: in device memory where the program placed its state and a device is in force
(`runtime_lib.use_device`; initial values put there through the device), in host memory
otherwise. A call whose tensor input does not fit the method (another rank, other static
sizes, beyond a dynamic input's bounds) is refused before it runs (`method_inputs`).
`state()` / `load_state()` / `reset()` read, write and re-initialise the buffers by
FQN without reloading. `state_traffic()` reports, per buffer FQN, the bytes of state moved per
call: the delegate runtime's own copies (the runtime's tally of this program's calls,
`tte_program_copy_bytes`) plus every copy op the emitted program runs on that buffer. Outputs
are fresh host tensors.

Threads: a program is one thread's at a time; programs of their own run in parallel in several
threads. `run` holds the GIL only for its argument checks and wrapping, not for the native call
(ctypes releases it), and keeps no per-call bookkeeping in Python beyond a call count.
"""
from __future__ import annotations

import ctypes
import warnings
from pathlib import Path
from collections.abc import Mapping

import torch

from ...contracts.dtypes import SCALAR_TYPES
from ...contracts.shared_arenas import RECORD_KEY
from ...errors import ArgumentTypeError, ExecutionError, UnknownName, UsageError
from ... import runtime_lib
from . import log_sink
from ..inspecting.pte_check import PteError, read_pte_program
from .method_choice import NoSuchMethodError, default_method, method_to_run
from .method_inputs import check_call, specs_by_method
from ..inspecting.traffic import flatbuffer_program, plan_copy_paths

_CODES: dict[torch.dtype, int] = {getattr(torch, name): code
                                  for code, (name, _) in SCALAR_TYPES.items()}
_DTYPES: dict[int, torch.dtype] = {code: dt for dt, code in _CODES.items()}


def _value(arg: object, keep: list[torch.Tensor]) -> runtime_lib.TteValue:
    v = runtime_lib.TteValue()
    if isinstance(arg, torch.Tensor):
        # a CUDA (or strided) tensor is handed in as its contiguous host copy
        t = arg if arg.is_cpu and arg.is_contiguous() else arg.detach().to("cpu").contiguous()
        code, ndim = _CODES.get(t.dtype), t.dim()
        if code is None:
            raise ArgumentTypeError(
                f"input of dtype {t.dtype}: a program takes {sorted(map(str, _CODES))}")
        if ndim > 16:
            raise ArgumentTypeError(f"input of rank {ndim}: at most 16 dimensions")
        keep.append(t)
        v.kind, v.dtype, v.ndim = 0, code, ndim
        v.sizes[:ndim] = t.shape
        v.data, v.nbytes = t.data_ptr(), t.nbytes
    elif isinstance(arg, bool):
        v.kind, v.i = 3, int(arg)
    elif isinstance(arg, int):
        v.kind, v.i = 1, arg
    elif isinstance(arg, float):
        v.kind, v.d = 2, arg
    elif arg is None:
        v.kind = 4
    else:
        raise ArgumentTypeError(f"a program input is a tensor, int, float, bool or None, not "
                        f"{type(arg).__name__}")
    return v


def _from(v: runtime_lib.TteValue):
    """A value out of the program, as a fresh host tensor (read through the device if need be)."""
    if v.kind == 1:
        return int(v.i)
    if v.kind == 2:
        return float(v.d)
    if v.kind == 3:
        return bool(v.i)
    if v.kind == 4:
        return None
    t = torch.empty(v.sizes[:v.ndim], dtype=_DTYPES[v.dtype])
    if v.nbytes:
        code = runtime_lib.load().tte_runtime_copy(t.data_ptr(), v.data, v.nbytes)
        if code:
            raise ExecutionError(f"reading a {v.nbytes}-byte value out of the program failed "
                               f"(error 0x{code:x})")
    return t


class Program:
    """A loaded `.pte`: upstream's program interface (`method_names`, `run(inputs, method)`,
    `forward(*inputs)`) and this project's (`run(*args, method=...)`, `state_traffic()`,
    `state()`, `load_state()`, `reset()`)."""

    def __init__(self, path: str | Path, method: str | None = None, data_files=None):
        self._handle = None
        lib = runtime_lib.load()
        log_sink.route_logs_to_fd2()  # a log line with non-UTF-8 bytes must not kill us
        self.path = str(path)
        self.data_file = _data_file(data_files)
        self._program = read_pte_program(path)   # the flatbuffer only: no engine bytes twice
        code, why = ctypes.c_int(0), ctypes.create_string_buffer(4096)
        runtime_lib.clear_last_refusal()
        handle = lib.tte_program_open_with_data(
            self.path.encode(), (self.data_file or "").encode(), ctypes.byref(code), why,
            len(why))
        if not handle:
            self._refuse_open(why.value.decode("utf-8", "replace"))
        self._handle = handle
        if notice := lib.tte_program_notice(handle):
            warnings.warn(f"{self.path}: {notice.decode()}", UserWarning, stacklevel=3)
        self._names = [lib.tte_program_method_name(handle, i).decode()
                       for i in range(lib.tte_program_method_count(handle))]
        # the main method (`method_choice`): None when the program has no default
        self.method_name = (default_method(self._names) if method is None
                            else method_to_run(self.path, self._names, method))
        self._calls: dict[str, int] = {}
        self._plan = flatbuffer_program(self._program)
        self._inputs = specs_by_method(self._plan)

    def _refuse_open(self, why: str):
        if why.startswith("Failed to load method") and self.data_file \
                and not runtime_lib.last_refusal():   # ExecuTorch's reader of the .ptd refused it
            raise PteError(f"{self.path}: ExecuTorch could not read its data file "
                           f"{self.data_file} ({why}): it is truncated, damaged or not a .ptd; "
                           "pass the .ptd saved with this .pte")
        if why.startswith("Failed to load method"):   # a refused delegate: its reason, too
            raise runtime_lib.refusal_error(why)
        if why.startswith("method '"):                # state on a device, and none in force
            raise PteError(f"{self.path}: {why}")
        if why.startswith(RECORD_KEY):   # its record of the arenas methods share
            raise PteError(f"{self.path}: {why}. The file is corrupt or was not written by "
                           "torch-tensorrt-ext; re-export it")
        raise PteError(f"{self.path}: ExecuTorch refused the program ({why}); its log line "
                       f"on stderr says why. The file is corrupt or was not written by "
                       f"this ExecuTorch; re-export it")

    def __del__(self):
        if getattr(self, "_handle", None):
            runtime_lib.load().tte_program_close(self._handle)
            self._handle = None

    @property
    def method_names(self):
        return set(self._names)

    def _check(self, name: str) -> bytes:
        if name not in self._names:
            raise NoSuchMethodError(
                f"{self.path} has no method {name!r}; it has {sorted(self._names)}")
        return name.encode()

    def run(self, *args, method: str | None = None) -> list[torch.Tensor]:
        """One call of `method` (default: the program's main method, `method_choice`). Takes the
        inputs as arguments, or upstream's way: one list of inputs and the method second."""
        if len(args) in (1, 2) and isinstance(args[0], (list, tuple)):
            if len(args) == 2:
                method = args[1]
            args = tuple(args[0])
        name = method_to_run(self.path, self._names, method or self.method_name)
        key = name.encode()
        check_call(name, self._inputs.get(name, ()), args)
        lib = runtime_lib.load()
        keep: list[torch.Tensor] = []
        values = (runtime_lib.TteValue * max(len(args), 1))(*[_value(a, keep) for a in args])
        n_out, why = ctypes.c_size_t(0), ctypes.create_string_buffer(4096)
        # The native call runs without the GIL (ctypes releases it): programs in other threads
        # run meanwhile. It clears this thread's last refusal first, so a refusal it leaves is
        # this call's.
        code = lib.tte_program_execute(self._handle, key, values, len(args), ctypes.byref(n_out),
                                       why, len(why))
        if code:
            raise runtime_lib.refusal_error(why.value.decode("utf-8", "replace"))
        self._calls[name] = self._calls.get(name, 0) + 1   # to average the runtime's tally
        outs = []
        for j in range(n_out.value):
            v = runtime_lib.TteValue()
            if lib.tte_program_output(self._handle, key, j, ctypes.byref(v)):
                raise ExecutionError(f"output {j} of {name!r} is not a value Python can take")
            outs.append(_from(v))
        return outs

    def forward(self, *inputs):
        """Upstream's `forward(*inputs)`: one call of "forward"."""
        return self.run(*inputs, method="forward")

    def _buffers(self, name: str):
        lib = runtime_lib.load()
        key = self._check(name)
        for i in range(lib.tte_program_buffer_count(self._handle, key)):
            fqn, v = ctypes.c_char_p(), runtime_lib.TteValue()
            code = lib.tte_program_buffer(self._handle, key, i, ctypes.byref(fqn),
                                          ctypes.byref(v))
            if code:
                raise ExecutionError(f"buffer {i} of {name!r} cannot be read (error 0x{code:x})")
            yield fqn.value.decode(), v

    def state(self) -> dict[str, torch.Tensor]:
        """Every mutable buffer (FQN -> a fresh host copy of its current value)."""
        out: dict[str, torch.Tensor] = {}
        for name in self._names:
            for fqn, v in self._buffers(name):
                out.setdefault(fqn, _from(v))
        return out

    def load_state(self, values: Mapping[str, torch.Tensor]) -> None:
        """Write buffers by FQN (every method's copy of each), e.g. a `state()` snapshot. An
        unknown FQN, or a value of another dtype or shape, is refused naming it; nothing is
        written then."""
        lib = runtime_lib.load()
        targets = {}
        for name in self._names:
            for fqn, v in self._buffers(name):
                targets.setdefault(fqn, []).append(v)
        unknown = sorted(set(values) - set(targets))
        if unknown:
            raise UnknownName(f"{self.path} has no mutable buffer {unknown[0]!r}; it has "
                           f"{sorted(targets)}")
        staged = {}
        for fqn, value in values.items():
            v = targets[fqn][0]
            want = ([v.sizes[k] for k in range(v.ndim)], _DTYPES[v.dtype])
            t = value.detach().to("cpu").contiguous()
            if (list(t.shape), t.dtype) != (want[0], want[1]):
                raise UsageError(f"buffer {fqn!r} is {want[1]} {want[0]}; the value given is "
                                 f"{t.dtype} {list(t.shape)}")
            staged[fqn] = t
        for fqn, t in staged.items():
            for v in targets[fqn]:
                code = lib.tte_runtime_copy(v.data, t.data_ptr(), v.nbytes)
                if code:
                    raise ExecutionError(f"writing buffer {fqn!r} failed (error 0x{code:x})")

    def reset(self) -> None:
        """Every mutable buffer of every method back to its initial value, without reloading
        (a new sequence)."""
        why = ctypes.create_string_buffer(1024)
        code = runtime_lib.load().tte_program_reset(self._handle, why, len(why))
        if code:
            raise ExecutionError(f"{self.path}: {why.value.decode('utf-8', 'replace')}")

    def state_traffic(self, method: str | None = None) -> dict[str, int]:
        """FQN -> bytes moved per call of `method` (default: the main method; runtime copies
        averaged over the calls made so far)."""
        return {f: sum(paths.values()) for f, paths in self.state_traffic_by_path(method).items()}

    def _static_paths(self, name: str) -> dict[str, dict[str, int]]:
        return plan_copy_paths(next(p for p in self._plan.execution_plan if p.name == name))

    def state_traffic_by_path(self, method: str | None = None) -> dict[str, dict[str, int]]:
        """FQN -> {"device", "link", "host"} bytes moved per call of `method` (default: the main
        method): within device memory, across the host-device link (PCIe on a GPU), within host
        memory — the runtime's copies (averaged over the calls made so far) plus the program's
        own copy kernels."""
        name = method_to_run(self.path, self._names, method or self.method_name)
        calls, lib, key = max(self._calls.get(name, 0), 1), runtime_lib.load(), name.encode()
        out = {}
        for f, static in self._static_paths(name).items():
            out[f] = {p: static.get(p, 0) + int(lib.tte_program_copy_bytes(
                self._handle, key, f.encode("utf-8"), i)) // calls
                for i, p in enumerate(runtime_lib.COPY_PATHS)}
        return out

    def program_copy_bytes(self, method: str | None = None) -> dict[str, int]:
        name = method_to_run(self.path, self._names, method or self.method_name)
        return {f: sum(p.values()) for f, p in self._static_paths(name).items()}


def _data_file(data_files) -> str | None:
    """The one external data file (`.ptd`) a program is loaded with, checked to exist."""
    if data_files is None:
        return None
    files = [data_files] if isinstance(data_files, (str, Path)) else list(data_files)
    if len(files) > 1:
        raise PteError(f"a program loads with one data file (the .ptd saved beside it), not "
                       f"{len(files)}: {[str(f) for f in files]}")
    if not files:
        return None
    f = Path(files[0])
    if not f.is_file():
        raise PteError(f"data file {f} does not exist; pass the .ptd saved with the .pte")
    return str(f)


def load(path: str | Path, method: str | None = None, data_files=None) -> Program:
    return Program(path, method, data_files)


__all__ = ["Program", "NoSuchMethodError", "load"]
