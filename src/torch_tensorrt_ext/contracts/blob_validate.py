"""Validating delegate blob metadata (docs/CONTRACTS.md §1), for `blob.parse`, `blob.serialize`
and the engines that check a plan before it is written — the twin of runtime/src/blob_validate.cpp
(reading is `blob_metadata`, the twin of runtime/src/blob_metadata.cpp).

Invariant: `validate` accepts exactly what the C++ `validate_blob` accepts — check for check, in
the same order, each refusal a `BlobError` whose `.check` is the id the C++ reader names
(blob_checks.CHECKS) and whose message names the key, binding or value; nothing else is raised.
A binding larger than 2**63-1 bytes is refused. It builds on `blob_model`, `blob_checks`,
`dtypes` and `shape_text` only.
"""
from __future__ import annotations

from .blob_checks import BlobError
from .blob_model import (
    ENGINE_KINDS, MAGIC_TR03, MAX_BINDING_BYTES, UNKNOWN_IN_TR03, BlobMetadata, CopyBack,
    IOBinding,
)
from .dtypes import DTYPES
from .shape_text import shape_text

__all__ = ["validate"]


# ----------------------------------------------------------------------------------- validation

def _shape_str(b: IOBinding) -> str:
    if not b.known:
        return "unknown"
    bound = f" (max {shape_text(b.max_shape)})" if b.max_shape else ""
    return f"{b.dtype} {shape_text(b.shape)}{bound}"




def _check_max_shape(b: IOBinding) -> None:
    """A max_shape bounds a dynamic binding: its rank, its static dims as they are, and at most
    2**63-1 bytes in all (the memory planned for it)."""
    why = None
    if not any(s < 0 for s in b.shape):
        why = "the binding has no dynamic (-1) dimension"
    elif len(b.max_shape) != len(b.shape):
        why = f"rank {len(b.max_shape)}, the binding's is {len(b.shape)}"
    elif any(s >= 0 and m != s for s, m in zip(b.shape, b.max_shape, strict=False)):
        why = "it differs from the binding's static dimensions"
    else:
        n = DTYPES[b.dtype]
        for m in b.max_shape:
            n *= m
        if n > MAX_BINDING_BYTES:
            why = "it bounds the binding at more than 2**63-1 bytes"
    if why:
        raise BlobError(f"binding '{b.name}' ({_shape_str(b)}) has max_shape "
                        f"{shape_text(b.max_shape)}: {why}", check="binding.max_shape")


def _fits(b: IOBinding) -> bool:
    """Its static dims times its element size are at most MAX_BINDING_BYTES (the C++ reader's
    size_t arithmetic must not wrap)."""
    if not b.known:
        return True
    n = DTYPES[b.dtype]
    for s in b.shape:
        if s >= 0:
            n *= s
            if n > MAX_BINDING_BYTES:
                return False
    return True


class _Validator:
    """One pass of the checks over `meta`, in validate_blob's order; the sets it fills are what
    later checks consult (aliased outputs, delegate outputs, copied outputs, writers)."""

    def __init__(self, meta: BlobMetadata, magic: bytes) -> None:
        self.meta, self.magic = meta, magic
        self.by_name: dict[str, IOBinding] = {}
        self.writer_of: dict[str, str] = {}  # input binding -> the output writing into it
        self.aliased: set[str] = set()
        self.delegate_outs: set[str] = set()
        self.copied: set[str] = set()

    def run(self) -> None:
        self.bindings()
        self.aliased_pairs()
        if self.meta.engine_kind not in ENGINE_KINDS:  # a hand-built BlobMetadata's
            raise BlobError(f"engine_kind '{self.meta.engine_kind}' is not one of "
                            f"{list(ENGINE_KINDS)}", check="metadata.engine_kind")
        self.delegate_inputs()
        self.delegate_outputs()
        self.buffers()
        for i, c in enumerate(self.meta.copy_back):
            self.copy_back_pair(i, c)
        self.outputs_targeted()

    def bindings(self) -> None:
        for b in self.meta.io_bindings:
            if b.name in self.by_name:
                raise BlobError(f"binding name '{b.name}' appears twice in io_bindings",
                                check="binding.duplicate")
            self.by_name[b.name] = b
            if self.magic == MAGIC_TR03 and not b.known:
                raise BlobError(f"binding '{b.name}' has an empty dtype; {UNKNOWN_IN_TR03}",
                                check="binding.unknown_in_tr03")
            if not _fits(b):
                raise BlobError(f"binding '{b.name}' ({_shape_str(b)}) is larger than 2**63-1 "
                                f"bytes", check="binding.too_large")
            if b.max_shape:
                _check_max_shape(b)

    def need(self, name: str, want_input: bool, where: str) -> IOBinding:
        b = self.by_name.get(name)
        kind = "input" if want_input else "output"
        if b is None:
            raise BlobError(f"{where} names {kind} '{name}', which is not a binding",
                            check="ref.missing")
        if b.is_input != want_input:
            raise BlobError(f"{where} names {kind} '{name}', which is an "
                            f"{'input' if b.is_input else 'output'} binding",
                            check="ref.direction")
        return b

    @staticmethod
    def same_type(out: IOBinding, inp: IOBinding, what: str, check: str) -> None:
        if out.known != inp.known or out.dtype != inp.dtype or \
                tuple(out.shape) != tuple(inp.shape) or out.max_shape != inp.max_shape:
            raise BlobError(f"{what} pair '{out.name}' -> '{inp.name}' differs: output is "
                            f"{_shape_str(out)}, input is {_shape_str(inp)}", check=check)

    def record_writer(self, inp: str, out: str) -> None:
        """An input binding is written by at most one output (aliased or copy-back)."""
        if inp in self.writer_of:
            raise BlobError(f"input binding '{inp}' is written by both "
                            f"'{self.writer_of[inp]}' and '{out}'", check="writer.twice")
        self.writer_of[inp] = out

    def aliased_pairs(self) -> None:
        for i, a in enumerate(self.meta.aliased_io):
            out = self.need(a.output, False, f"aliased_io[{i}]")
            inp = self.need(a.input, True, f"aliased_io[{i}]")
            if out.known and inp.known:  # else: the runtime compares the tensors at execute
                self.same_type(out, inp, "aliased", "aliased.mismatch")
            if a.output in self.aliased:
                raise BlobError(f"output binding '{a.output}' is aliased twice in aliased_io",
                                check="aliased.twice")
            self.aliased.add(a.output)
            self.record_writer(a.input, a.output)

    def delegate_inputs(self) -> None:
        seen = set()
        for i, name in enumerate(self.meta.delegate_inputs):
            self.need(name, True, f"delegate_inputs[{i}]")
            if name in seen:
                raise BlobError(f"delegate_inputs lists input binding '{name}' twice",
                                check="delegate_inputs.duplicate")
            seen.add(name)
        for name in self.meta.input_names:
            if name not in seen:
                raise BlobError(f"delegate_inputs misses input binding '{name}' (every input "
                                f"binding must be a delegate argument)",
                                check="delegate_inputs.missing")

    def delegate_outputs(self) -> None:
        for i, name in enumerate(self.meta.delegate_outputs):
            self.need(name, False, f"delegate_outputs[{i}]")
            if name in self.delegate_outs:
                raise BlobError(f"delegate_outputs lists output binding '{name}' twice",
                                check="delegate_outputs.duplicate")
            self.delegate_outs.add(name)

    def buffers(self) -> None:
        fqns: dict[str, str] = {}
        inputs = set()
        for i, buf in enumerate(self.meta.buffers):
            self.need(buf.input, True, f"buffers[{i}]")
            if not buf.fqn:
                raise BlobError(f"buffers[{i}] has an empty fqn for input '{buf.input}'",
                                check="buffers.empty_fqn")
            if buf.input in inputs:
                raise BlobError(f"buffers lists input binding '{buf.input}' twice",
                                check="buffers.duplicate_input")
            if buf.fqn in fqns:
                raise BlobError(f"buffer '{buf.fqn}' is bound to both '{fqns[buf.fqn]}' and "
                                f"'{buf.input}'", check="buffers.duplicate_fqn")
            inputs.add(buf.input)
            fqns[buf.fqn] = buf.input

    def copy_back_pair(self, i: int, c: CopyBack) -> None:
        out = self.need(c.output, False, f"copy_back[{i}]")
        inp = self.need(c.input, True, f"copy_back[{i}]")
        self.same_type(out, inp, "copy_back", "copy_back.mismatch")
        if c.output in self.aliased:
            raise BlobError(f"output binding '{c.output}' is both aliased and copy-back",
                            check="copy_back.aliased")
        if c.output in self.copied:
            raise BlobError(f"copy_back lists output binding '{c.output}' twice",
                            check="copy_back.duplicate")
        self.copied.add(c.output)
        self.record_writer(c.input, c.output)
        if c.output not in self.delegate_outs and any(s < 0 for s in out.shape):
            raise BlobError(f"copy-back output '{c.output}' has a dynamic shape "
                            f"{shape_text(out.shape)}; the runtime needs a static one for its "
                            f"scratch", check="copy_back.dynamic_scratch")

    def outputs_targeted(self) -> None:
        targeted = self.delegate_outs | self.aliased | self.copied
        for name in self.meta.output_names:
            if name not in targeted:
                raise BlobError(f"output binding '{name}' is neither a delegate output, aliased "
                                f"(aliased_io) nor copy-back (copy_back): its value would be "
                                f"dropped", check="output.dropped")


def validate(meta: BlobMetadata, magic: bytes = MAGIC_TR03) -> None:
    """Raise `BlobError` unless `meta` is self-consistent (CONTRACTS.md §1, "Validation") as a
    blob with `magic` (TR03, what `serialize` writes, refuses unknown bindings)."""
    _Validator(meta, magic).run()


# --------------------------------------------------------------------------------------- reading
