"""The reference kernel behind `tte::execute_engine` (the engine-call contract is
`contracts.engine_call`): registers the op, its fake kernel, and the CPU kernel that runs a
reference payload (an ExecuTorch program) with ExecuTorch's kernels.

Invariant: like a TensorRT engine with `IKVCacheUpdateLayer`s, a call writes each aliased output
in place through its input's memory; unlike upstream, it also writes each copy-back output into
its buffer, so calling the compiled module from PyTorch updates every buffer exactly like eager.
The returned tensors are fresh (never views of the inputs).
"""
from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

import torch

from ..contracts.dtypes import TORCH_DTYPES
from ..contracts.engine_call import SCHEMA, Signature
from ..errors import ExecutionError
from .weights import mismatch

_lib = torch.library.Library("tte", "FRAGMENT")  # noqa: TOR901 - shared namespace
_lib.define(SCHEMA)


def _fake(inputs: list[torch.Tensor], engine: torch.Tensor, weights: list[torch.Tensor],
          signature: str) -> list[torch.Tensor]:
    """The outputs' fake values, made by a factory with no tensor argument: derived from the
    engine constant (`engine.new_empty`), fake-tensor constant propagation would run the op for
    real and keep a 0-d output as a *constant* of uninitialised memory — whose `.item()` a retrace
    then reads as a concrete int (ExecuTorch's llama with custom SDPA: the start position an
    engine computes became 140627249405328 and failed its `u0 <= 15` bound in save)."""
    sig = Signature.parse(signature)
    shapes = [t.shape for t in inputs]
    return [torch.empty(sig.output_shape(b, shapes), dtype=TORCH_DTYPES[b.dtype],
                        device=engine.device)
            for b in sig.metadata.outputs]


@functools.lru_cache(maxsize=64)
def _loaded_method(payload_digest: str, payload: bytes):
    from .. import runtime_lib
    runtime_lib.load()  # registers tte::kv_cache_update.out into the shared kernel registry
    from executorch.runtime import Runtime
    program = Runtime.get().load_program(payload)
    return program.load_method("forward")


def run_payload(payload: bytes, inputs: Sequence[torch.Tensor],
                weights: Sequence[torch.Tensor] = ()) -> list[torch.Tensor]:
    """Run a reference payload (an ExecuTorch program) with ExecuTorch's kernels; `weights`
    are its trailing inputs (`engines.weights`)."""
    digest = hashlib.sha256(payload).hexdigest()
    method = _loaded_method(digest, payload)
    return [t.clone() for t in method.execute([t.contiguous() for t in inputs] + list(weights))]


def _cpu(inputs: list[torch.Tensor], engine: torch.Tensor, weights: list[torch.Tensor],
         signature: str) -> list[torch.Tensor]:
    sig = Signature.parse(signature)
    meta = sig.metadata
    if meta.engine_kind != "reference":
        raise ExecutionError(
            f"engine {sig.name!r} is a {meta.engine_kind} engine: it runs through torch-tensorrt's "
            "runtime on a GPU with TensorRT, not on this CPU path")
    if len(inputs) != len(meta.inputs):
        raise ExecutionError(f"engine {sig.name!r} takes {len(meta.inputs)} inputs "
                           f"{list(meta.input_names)}, got {len(inputs)}")
    wrong = mismatch(sig.name, meta.weights, weights)
    if wrong is not None:
        raise ExecutionError(wrong)
    outs = run_payload(engine.numpy().tobytes(), inputs, weights)
    index = {n: i for i, n in enumerate(meta.input_names)}
    out_index = {n: i for i, n in enumerate(meta.output_names)}
    for a in meta.aliased_io:           # IKVCacheUpdateLayer: written through the input
        inputs[index[a.input]].copy_(outs[out_index[a.output]])
    for c in meta.copy_back:            # the new value lands in its buffer, as eager does
        inputs[index[c.input]].copy_(outs[out_index[c.output]])
    return outs


_lib.impl("execute_engine", _cpu, "CompositeExplicitAutograd")
torch.library.register_fake("tte::execute_engine", _fake, lib=_lib)

OP = torch.ops.tte.execute_engine.default
# An engine call writes state in place even when none of its outputs is read (a partition that
# only updates buffers): dead-code elimination must never remove it.
torch.fx.node.has_side_effect(OP)


def _edge_op_has_side_effect() -> None:
    from executorch.exir.dialects._ops import ops as exir_ops
    torch.fx.node.has_side_effect(exir_ops.edge.tte.execute_engine.default)


_edge_op_has_side_effect()
