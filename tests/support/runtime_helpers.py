"""Test helpers for the C++ runtime: reference payloads, TR03 blobs and hand-lowered .pte files.

Invariant: these helpers build inputs for the runtime the way the contracts say the product
does — payloads are complete ExecuTorch programs with graph inputs/outputs not memory planned
(CONTRACTS.md §2), blobs come from `torch_tensorrt_ext.contracts.blob.serialize` (§1), and the
outer program's delegate carries backend id "TensorRTBackend" — but they compile nothing
themselves: the engine is an explicit `nn.Module` whose inputs/outputs are the engine bindings.
The test backend class has a private name (so it never shadows the product's `TensorRTBackend`
preprocess in `BackendDetails.__subclasses__()`); the lowered module is renamed afterwards.

Used by tests/runtime/test_runtime_*.py, runtime/tests/gen_payloads.py (ctest fixtures) and
tests/support/device_cases.py (the runner's cases).
"""
from __future__ import annotations

import json
from pathlib import Path
from dataclasses import dataclass, field
from collections.abc import Sequence

import torch

from torch_tensorrt_ext.engines import kv_op  # noqa: F401  (defines tte::kv_cache_update)
from torch_tensorrt_ext.contracts import blob as B
from torch_tensorrt_ext.contracts.dtypes import DTYPE_NAMES as _DTYPE_NAMES

BACKEND_ID = "TensorRTBackend"


def _et_config(alloc_graph_input: bool, alloc_graph_output: bool):
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass
    return ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(
        alloc_graph_input=alloc_graph_input, alloc_graph_output=alloc_graph_output))


def payload_pte(engine: torch.nn.Module, example_args: Sequence[torch.Tensor],
                planned_io: bool = False) -> bytes:
    """The reference payload: `engine.forward` as an ExecuTorch program, graph I/O unplanned."""
    from executorch.exir import to_edge
    ep = torch.export.export(engine, tuple(example_args), strict=True)
    return to_edge(ep).to_executorch(_et_config(planned_io, planned_io)).buffer


@dataclass
class EngineSpec:
    """An engine and how its bindings meet the delegate (names are binding names)."""

    module: torch.nn.Module
    inputs: dict[str, torch.Tensor]       # input binding -> example (in engine order)
    outputs: list[str]                    # output bindings, in engine output order
    delegate_outputs: list[str]
    aliased: list[tuple[str, str]] = field(default_factory=list)    # (output, input)
    copy_back: list[tuple[str, str]] = field(default_factory=list)  # (output, input)
    buffers: dict[str, str] = field(default_factory=dict)           # input binding -> fqn
    planned_io: bool = False

    def metadata(self, delegate_inputs: Sequence[str]) -> B.BlobMetadata:
        with torch.no_grad():
            outs = self.module(*self.inputs.values())
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        bindings = [B.IOBinding(n, _DTYPE_NAMES[t.dtype], tuple(t.shape), True)
                    for n, t in self.inputs.items()]
        bindings += [B.IOBinding(n, _DTYPE_NAMES[t.dtype], tuple(t.shape), False)
                     for n, t in zip(self.outputs, outs, strict=False)]
        return B.BlobMetadata(
            io_bindings=tuple(bindings),
            aliased_io=tuple(B.AliasedIO(o, i) for o, i in self.aliased),
            engine_kind="reference",
            delegate_inputs=tuple(delegate_inputs),
            delegate_outputs=tuple(self.delegate_outputs),
            buffers=tuple(B.BufferBinding(i, f) for i, f in self.buffers.items()),
            copy_back=tuple(B.CopyBack(o, i) for o, i in self.copy_back))

    def blob(self, delegate_inputs: Sequence[str]) -> bytes:
        payload = payload_pte(self.module, list(self.inputs.values()), self.planned_io)
        return B.serialize(self.metadata(delegate_inputs), payload)


def _backend_details():
    """The test preprocess: the blob travels in the compile spec `tte_engine`; the delegate's
    argument order is read off the partition's placeholders (named like the bindings)."""
    from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult

    class _TteTestReferenceBackend(BackendDetails):
        @staticmethod
        def preprocess(edge_program, compile_specs):
            spec = {s.key: s.value for s in compile_specs}
            engine: EngineSpec = _SPECS[spec["tte_engine"].decode()]
            names = list(edge_program.graph_signature.user_inputs)
            return PreprocessResult(processed_bytes=engine.blob(names))

    return _TteTestReferenceBackend


_SPECS: dict[str, EngineSpec] = {}
_BACKEND = None


def delegated_pte(outer: torch.nn.Module, outer_args: dict[str, torch.Tensor],
                  engine: EngineSpec) -> bytes:
    """A .pte whose whole graph is one TensorRTBackend delegate running `engine`.

    `outer` has the eager signature of the delegate (its argument names are the engine's input
    binding names; it returns the delegate outputs) and is exported and fully partitioned; its
    graph inputs are not memory planned, so the caller's tensors reach the delegate as they are
    (aliased and copy-back writes land in them).
    """
    global _BACKEND
    from executorch.exir import to_edge
    from executorch.exir.backend.compile_spec_schema import CompileSpec
    from executorch.exir.backend.partitioner import (DelegationSpec, PartitionResult,
                                                    Partitioner)
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    if _BACKEND is None:
        _BACKEND = _backend_details()
    key = f"engine{len(_SPECS)}"
    _SPECS[key] = engine

    class _WholeGraph(Partitioner):
        def partition(self, ep):
            spec = DelegationSpec(_BACKEND.__name__, [CompileSpec("tte_engine", key.encode())])
            for node in ep.graph_module.graph.nodes:
                if node.op == "call_function":
                    node.meta["delegation_tag"] = "tte0"
            return PartitionResult(tagged_exported_program=ep, partition_tags={"tte0": spec})

    ep = torch.export.export(outer, tuple(outer_args.values()), strict=True)
    edge = to_edge(ep).to_backend(_WholeGraph())
    lowered = [m for m in edge.exported_program().graph_module.modules()
               if isinstance(m, LoweredBackendModule)]
    assert len(lowered) == 1, f"expected one delegate, got {len(lowered)}"
    lowered[0]._backend_id = BACKEND_ID
    return edge.to_executorch(_et_config(False, True)).buffer


# --------------------------------------------------------------------------- the test engines

class KvStepEngine(torch.nn.Module):
    """KV write (aliased: cache_out -> cache) and a step counter (copy-back: step_out -> step).
    logits read the *updated* cache, as the in-place engine does."""

    def forward(self, cache, tok, pos, step):
        new = kv_op.kv_cache_update(cache, 2, pos, tok)
        return new.sum(dim=2) + step, new, step + 1


class KvStepOuter(torch.nn.Module):
    """The delegate's eager signature (arguments named like the engine bindings)."""

    def forward(self, tok, pos, cache, step):
        new = kv_op.kv_cache_update(cache, 2, pos, tok)
        return new.sum(dim=2) + step


def kv_step_inputs(heads=2, s_max=4, hidden=1024):
    return {
        "cache": torch.zeros(1, heads, s_max, hidden),
        "tok": torch.zeros(1, heads, 1, hidden),
        "pos": torch.tensor([0], dtype=torch.int64),
        "step": torch.tensor([0], dtype=torch.int64),
    }


def kv_step_spec(**shape) -> EngineSpec:
    return EngineSpec(
        module=KvStepEngine(), inputs=kv_step_inputs(**shape),
        outputs=["logits", "cache_out", "step_out"], delegate_outputs=["logits"],
        aliased=[("cache_out", "cache")], copy_back=[("step_out", "step")],
        buffers={"cache": "layers.0.attn.k_cache", "step": "step"})


class RingEngine(torch.nn.Module):
    """A ring buffer (copy-back): y reads the old ring; ring_out shifts x in."""

    def forward(self, x, ring):
        return ring.sum(dim=0) + x, torch.cat([ring[1:], x.unsqueeze(0)], dim=0)


class RingOuter(torch.nn.Module):
    def forward(self, x, ring):
        return ring.sum(dim=0) + x


def ring_spec(planned_io=False) -> EngineSpec:
    return EngineSpec(
        module=RingEngine(), inputs={"x": torch.zeros(3), "ring": torch.zeros(4, 3)},
        outputs=["y", "ring_out"], delegate_outputs=["y"], copy_back=[("ring_out", "ring")],
        buffers={"ring": "ring.buf"}, planned_io=planned_io)


def describe(spec: EngineSpec, delegate_inputs: Sequence[str]) -> str:
    return json.dumps(spec.metadata(delegate_inputs).to_json_dict(), indent=1)


# ------------------------------------------------------------------------------ blob surgery

def reseal(blob: bytes) -> bytes:
    """`blob` with its TR03 digests recomputed for whatever it now holds (the engine digest only
    where the metadata text has `"engine_sha256":"` + 64 characters) — the same surgery as
    runtime/tests/blob_builder.h's `reseal`, so a test can change a blob and reach the checks
    behind the integrity check. Anything else is returned unchanged."""
    import hashlib
    import struct
    b = bytearray(blob)
    if len(b) < 64 or b[:4] != b"TR03":
        return bytes(b)
    _, md_off, md_size, eng_off, eng_size, _ = struct.unpack(B.HEADER_FORMAT, bytes(b[:32]))
    n = len(b)
    if md_off < 64 or md_off + md_size > n or eng_off > n or eng_size > n - eng_off:
        return bytes(b)
    key = b'"engine_sha256":"'
    at = b.find(key, md_off)
    if at >= 0 and at + len(key) + 64 <= md_off + md_size:
        digest = hashlib.sha256(bytes(b[eng_off:eng_off + eng_size])).hexdigest().encode()
        b[at + len(key):at + len(key) + 64] = digest
    b[32:64] = hashlib.sha256(bytes(b[md_off:md_off + md_size])).digest()
    return bytes(b)


def blob_in_pte(pte: bytes) -> slice:
    """Where the one delegate blob lies in a delegated .pte (its header's sizes give the end)."""
    import struct
    at = pte.find(b"TR03")
    assert at > 0 and pte.find(b"TR03", at + 1) == -1, "expected exactly one TR03 blob"
    _, _, _, eng_off, eng_size, _ = struct.unpack(B.HEADER_FORMAT, pte[at:at + 32])
    return slice(at, at + eng_off + eng_size)


def write_steps(io_dir, args_of, steps: int, shapes: bool = False) -> None:
    """The inputs of `steps` calls as `tte_run` reads them: io_dir/in.<step>.<i>.bin, raw (and
    with `shapes`, each input's shape in in.<step>.<i>.shape: a dynamic program's)."""
    for s in range(steps):
        for i, a in enumerate(args_of(s)):
            (io_dir / f"in.{s}.{i}.bin").write_bytes(a.contiguous().numpy().tobytes())
            if shapes:
                (io_dir / f"in.{s}.{i}.shape").write_text(",".join(map(str, a.shape)))


def read_output(io_dir, step: int, j: int, like: torch.Tensor) -> torch.Tensor:
    """Output `j` of call `step` written by `tte_run`, as a tensor shaped and typed like `like`."""
    raw = bytearray((io_dir / f"out.{step}.{j}.bin").read_bytes())
    return torch.frombuffer(raw, dtype=like.dtype).reshape(like.shape)


def run_runner(pte, io_dir, steps: int, device: str = "emulated", *extra: str):
    """`tte_run` (the C++ runner) over `pte`: (its CompletedProcess, its JSON summary or None)."""
    import subprocess
    from torch_tensorrt_ext.runtime_lib import runner_path
    done = subprocess.run([str(runner_path()), str(pte), "--io", str(io_dir), "--steps",
                           str(steps), "--device", device, *extra],
                          capture_output=True, text=True, timeout=300)
    last = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
    return done, (json.loads(last[0]) if last else None)


def runner_mismatches(case, io_dir, steps: int, device: str = "emulated"):
    """Case folder `case` (device_cases.write_case) stepped by `tte_run` in `io_dir` with
    `--reset`: (what is wrong by device_outputs' eager and summary checks — or the runner's exit —
    and the runner's JSON summary or None)."""
    from device_outputs import eager_mismatches, summary_mismatches
    done, summary = run_runner(Path(io_dir) / "m.pte", io_dir, steps, device, "--reset")
    if done.returncode != 0:
        return [f"{Path(case).name}: tte_run exited {done.returncode}: "
                f"{done.stderr[-300:]}"], None
    return eager_mismatches(case, io_dir)[0] + summary_mismatches(case, summary, True), summary


