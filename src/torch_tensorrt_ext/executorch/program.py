"""`load(path)`: run a `.pte` in ExecuTorch's runtime with this project's delegate runtime.

Invariant: `Program.run(*args)` executes one call of a method; mutable buffers persist across
calls in the runtime's own memory, exactly as they would in an ExecuTorch app. `state_traffic()`
reports, per buffer FQN, the bytes of state moved per call: the delegate runtime's own copies
(measured by its counters) plus every copy op the emitted program runs on that buffer.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Union

import torch

from ..errors import TteError
from .. import runtime_lib
from . import log_sink
from .pte_check import PteError, read_pte
from .traffic import program_copy_bytes


class NoSuchMethodError(TteError, KeyError):
    """A method name the `.pte` does not have; the message names the file and its methods."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


class Program:
    def __init__(self, path: Union[str, Path], method: str = "forward"):
        runtime_lib.load()
        log_sink.route_logs_to_fd2()  # a log line with non-UTF-8 bytes must not kill us
        from executorch.runtime import Runtime
        self.path = str(path)
        self._bytes = read_pte(path)
        try:
            self._program = Runtime.get().load_program(self.path)
        except RuntimeError as e:
            raise PteError(f"{self.path}: ExecuTorch refused the program ({e}); its log line "
                           f"on stderr says why. The file is corrupt or was not written by "
                           f"this ExecuTorch; re-export it") from None
        if method not in self._program.method_names:
            raise NoSuchMethodError(f"{self.path} has no method {method!r}; it has "
                                    f"{sorted(self._program.method_names)}")
        # Load every method before any runs: loading a method writes the initial values of its
        # mutable buffers, which must not wipe state another method already advanced.
        runtime_lib.clear_last_refusal()
        try:  # a refused delegate: the runtime's reason and the delegate, not just "0x23"
            self._methods = {name: self._program.load_method(name)
                             for name in sorted(self._program.method_names)}
        except RuntimeError as e:
            raise runtime_lib.refusal_error(e) from e
        self.method_name = method
        self._calls = 0
        self._runtime_bytes: Dict[str, int] = {}
        self._static = program_copy_bytes(self._bytes, method)

    @property
    def method_names(self):
        return self._program.method_names

    def _method(self, name: str):
        if name not in self._methods:
            raise NoSuchMethodError(
                f"{self.path} has no method {name!r}; it has {sorted(self._methods)}")
        return self._methods[name]

    def run(self, *args: torch.Tensor, method: Optional[str] = None) -> List[torch.Tensor]:
        name = method or self.method_name
        before = {f: runtime_lib.copy_bytes(f) for f in self._static}
        runtime_lib.clear_last_refusal()
        try:
            outs = self._method(name).execute(list(args))
        except RuntimeError as e:
            raise runtime_lib.refusal_error(e) from e
        if name == self.method_name:
            self._calls += 1
            for f in self._static:
                self._runtime_bytes[f] = self._runtime_bytes.get(f, 0) + \
                    runtime_lib.copy_bytes(f) - before[f]
        return list(outs)

    def state_traffic(self) -> Dict[str, int]:
        """FQN -> bytes moved per call (runtime copies averaged over the calls made so far)."""
        calls = max(self._calls, 1)
        return {f: self._static[f] + self._runtime_bytes.get(f, 0) // calls for f in self._static}

    def program_copy_bytes(self) -> Dict[str, int]:
        return dict(self._static)


def load(path: Union[str, Path], method: str = "forward") -> Program:
    return Program(path, method)
