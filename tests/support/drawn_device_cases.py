"""Drawn programs of several methods (method_grammar) as device cases (device_cases.DeviceCase),
so the runner (`tte_run`) steps programs nobody hand-wrote with their state in device memory — on
the emulated device here, on a GPU from scripts/device_bundle.py's bundle (`--drawn N`).

Invariant: `device_case(program)` calls the program's methods in the program's own interleaving
(`schedule()`, its resets left out: the state carries on through every call, positions restart as
scheduled) with the program's own inputs (`call_args`), then once each method the interleaving
never calls; step s is call s modulo their number. Each method is exported with the program's
example inputs (a dynamic prefill's first call may be one token, which torch.export
specializes). The eager copy calls the same methods on one model, so its state carries over
between methods as the program's does. A device case saves through `tte.reference.export({...})`
in fp32: the drawn save path and precision are the host generator's (`method_check`), not the
device's.
"""
from __future__ import annotations

import functools

import torch
from hypothesis import HealthCheck, Phase, given, seed, settings

from device_cases import DeviceCase
from method_grammar import CHUNK, MethodsProgram, methods_programs

# tokens of a call added for a method the interleaving never calls
_TOKENS = {"prefill": 2, "chunk": CHUNK, "decode": 1}


def drawn_programs(draw_seed: int, count: int) -> list[MethodsProgram]:
    """Up to `count` distinct programs hypothesis draws from `draw_seed` (every one saved with
    `tte.reference.export`, the device's save path)."""
    out: list[MethodsProgram] = []

    @seed(draw_seed)
    @settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(methods_programs(paths=("reference",)))
    def draw(program):
        if program not in out:
            out.append(program)

    draw()
    return out


def device_case(program: MethodsProgram) -> DeviceCase:
    calls = [c for c in program.schedule() if c[0] != "reset"]
    called = {name for name, _, _ in calls}
    calls += [(n, _TOKENS[n] if program.method(n).tokens else 0, 0)
              for n in program.names() if n not in called]

    def step(s: int) -> tuple[str, tuple]:
        i = s % len(calls)
        name, tokens, start = calls[i]
        return name, program.call_args(i, name, tokens, start, torch.float32)

    dims = {n: program.dynamic_shapes(n) for n in program.names() if program.dynamic_shapes(n)}
    return DeviceCase(program.build, step,
                      methods={n: functools.partial(program.method_module, name=n)
                               for n in program.names()},
                      dynamic=dims, example={n: program.example_args(n) for n in program.names()},
                      strict=program.strict)


def drawn_device_cases(draw_seed: int, count: int) -> dict[str, DeviceCase]:
    """name (`drawn_<seed>_<k>`) -> the device case of the k-th drawn program."""
    return {f"drawn_{draw_seed}_{k:03d}": device_case(p)
            for k, p in enumerate(drawn_programs(draw_seed, count))}


__all__ = ["device_case", "drawn_device_cases", "drawn_programs"]
