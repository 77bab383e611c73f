"""`EngineInfo`: the engine interface as data.

Invariant: an `EngineInfo` is immutable and self-consistent — every `AliasedIO` names an existing
output binding and an existing input binding, and no output is aliased twice. Construction
validates this, so code holding an `EngineInfo` never re-checks it. The same holds for
`copy_back`: each (output, input) names existing bindings, an output that is not aliased, once.
"""
from __future__ import annotations

from dataclasses import dataclass
from ..errors import UsageError


@dataclass(frozen=True)
class AliasedIO:
    """Output binding `output` is written in place through input binding `input`'s address."""

    output: str
    input: str
    kind: str = "kv_cache_update"


@dataclass(frozen=True)
class EngineInfo:
    """What a built engine reports about its I/O.

    `input_buffers` maps input binding name -> buffer FQN for lifted buffers and `output_buffers`
    output binding name -> FQN of the buffer whose new value it carries (both filled by the
    compiler that lifted them); `aliased_io` is the engine's own report of in-place outputs.
    """

    name: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    aliased_io: tuple[AliasedIO, ...] = ()
    input_buffers: tuple[tuple[str, str], ...] = ()
    output_buffers: tuple[tuple[str, str], ...] = ()   # output binding -> FQN of the new value
    device: str = "cpu"
    kind: str = "reference"
    input_shapes: tuple[tuple[int, ...], ...] = ()
    output_shapes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()
    output_dtypes: tuple[str, ...] = ()
    # (output, input): outputs the delegate copies into their input after each call (a copy-back
    # write handed to the engine's delegate; read from the engine's own record)
    copy_back: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        ins, outs = set(self.input_names), set(self.output_names)
        if len(ins) != len(self.input_names):
            raise UsageError(f"engine {self.name!r}: duplicate input binding names "
                             f"{self.input_names}")
        if len(outs) != len(self.output_names):
            raise UsageError(f"engine {self.name!r}: duplicate output binding names "
                             f"{self.output_names}")
        seen = set()
        for a in self.aliased_io:
            if a.output not in outs:
                raise UsageError(
                    f"engine {self.name!r}: aliased_io names output binding {a.output!r}, "
                    f"which is not among its outputs {list(self.output_names)}")
            if a.input not in ins:
                raise UsageError(
                    f"engine {self.name!r}: aliased_io names input binding {a.input!r}, "
                    f"which is not among its inputs {list(self.input_names)}")
            if a.output in seen:
                raise UsageError(f"engine {self.name!r}: output binding {a.output!r} "
                                 "is aliased twice")
            seen.add(a.output)
        for out, inp in self.copy_back:
            if out not in outs or inp not in ins or out in seen:
                raise UsageError(
                    f"engine {self.name!r}: copy_back ({out!r} -> {inp!r}) must name an output "
                    f"binding that is neither aliased nor copied twice and an input binding "
                    f"(outputs {list(self.output_names)}, inputs {list(self.input_names)})")
            seen.add(out)
        for binding, _fqn in self.input_buffers:
            if binding not in ins:
                raise UsageError(
                    f"engine {self.name!r}: buffer binding {binding!r} is not among its inputs")
        for binding, _fqn in self.output_buffers:
            if binding not in outs:
                raise UsageError(
                    f"engine {self.name!r}: buffer binding {binding!r} is not among its outputs")

    def aliased_buffers(self) -> dict:
        """FQN -> AliasedIO for every aliased output whose input is a lifted buffer."""
        by_input = dict(self.input_buffers)
        return {by_input[a.input]: a for a in self.aliased_io if a.input in by_input}
