"""No copy of an engine that is not needed on the way into a `.pte`.

The engine (a TensorRT engine, or a reference engine's payload holding the weights) is as large
as the model. Two copies were made while ExecuTorch lowered it: its isolated deep copy of every
partition before `preprocess`, and the blob's own assembly (bytes of the tensor, then the
concatenation). Now the partition handed to `preprocess` shares its tensors, and the engine is
copied exactly once, into the blob. Figures: `benchmarks/bench_scale.py --stages`.
"""
from __future__ import annotations

import tracemalloc

import pytest
import torch
from executorch.exir.backend.backend_details import BackendDetails

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.contracts import blob as blobfmt
from torch_tensorrt_ext.executorch.saving import backend
from torch_tensorrt_ext.executorch.saving.tensorrt_blob import tensor_bytes
from torch_tensorrt_ext.seams import executorch_hooks as seam
from torch_tensorrt_ext.upstream_api import torch_tensorrt_module

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class Stepper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)
        self.register_buffer("state", torch.zeros(1, 64))

    def forward(self, x):
        new = self.proj(x) + self.state * 0.5
        self.state.copy_(new)
        return new * 2


def _with_constant() -> torch.export.ExportedProgram:
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.arange(4096, dtype=torch.float32)  # a lifted tensor constant
            self.register_buffer("state", torch.zeros(4096))

        def forward(self, x):
            self.state.add_(x)
            return self.state + self.table
    return torch.export.export(M(), (torch.ones(4096),))


def _picked_backend():
    """The class ExecuTorch's `lower_all_submodules_to_backend` picks for "TensorRTBackend"."""
    return {c.__name__: c for c in BackendDetails.__subclasses__()}[backend.BACKEND_ID]


@pytest.mark.parametrize("which", ["ours", "upstream", "picked"])
def test_preprocess_copy_shares_tensors_and_isolates_the_graph(which):
    torch_tensorrt_module()
    import torch_tensorrt.executorch.backend as upstream
    cls = {"ours": backend.TensorRTBackend, "upstream": upstream.TensorRTBackend,
           "picked": _picked_backend()}[which]
    ep = _with_constant()
    copy = cls.copy_exported_program_for_preprocess(ep, [])
    assert copy.constants and copy.state_dict
    for name, t in ep.constants.items():
        assert copy.constants[name] is t, name
    for name, t in ep.state_dict.items():
        assert copy.state_dict[name] is t, name
    assert copy.graph_module is not ep.graph_module
    before = [n.name for n in ep.graph.nodes]
    out = copy.graph.output_node()
    with copy.graph.inserting_before(out):
        copy.graph.call_function(torch.ops.aten.neg.default, (out.args[0][0],))
    assert [n.name for n in ep.graph.nodes] == before   # the original graph is untouched
    assert copy.graph_signature is not ep.graph_signature


def test_a_reference_save_hands_preprocess_the_shared_copy(tmp_path, monkeypatch):
    """Through `torch_tensorrt.save`: every partition ExecuTorch isolates for preprocess goes
    through `program_for_preprocess`, and what `preprocess` reads — the payload's program and
    each weight (named data) — are views of the very tensors of the program ExecuTorch lowered
    (not copies of them)."""
    torch_tensorrt = torch_tensorrt_module()
    isolated, read = [], []
    real_isolate, real_bytes = backend.program_for_preprocess, backend.tensor_bytes

    def isolate(ep):
        copy = real_isolate(ep)
        isolated.append((ep, copy))
        return copy

    def spy_bytes(t):
        read.append(t)
        return real_bytes(t)
    monkeypatch.setattr(backend, "program_for_preprocess", isolate)      # our TensorRTBackend's
    monkeypatch.setattr(seam, "program_for_preprocess", isolate)         # upstream's (patch 0004)
    monkeypatch.setattr(backend, "tensor_bytes", spy_bytes)
    x = torch.randn(1, 64)
    ep = torch.export.export(Stepper().eval(), (x,))
    with tte.reference.engines():
        trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=[x], min_block_size=1)
        torch_tensorrt.save(trt, str(tmp_path / "m.pte"), output_format="executorch",
                            arg_inputs=[x])
    original, _ = isolated[0]
    held = {t.untyped_storage().data_ptr(): t
            for t in (*original.constants.values(), *original.state_dict.values())}
    assert len(isolated) == 1 and len(read) == 3          # the program, the weight, the bias
    got = [t.untyped_storage().data_ptr() for t in read]
    assert len(set(got)) == 3 and set(got) <= set(held)   # each the lowered program's own
    assert [held[p].dtype for p in got] == [torch.float32, torch.float32, torch.uint8]


def test_the_blob_copies_the_engine_once():
    """`serialize` of a 16 MiB engine handed as a view of a tensor: Python allocates the blob
    and nothing else of that size (it was three: bytes of the tensor, the concatenation)."""
    engine = torch.randint(0, 255, (16 << 20,), dtype=torch.uint8)
    meta = blobfmt.BlobMetadata(
        io_bindings=(blobfmt.IOBinding("x", "float32", (1,), True),
                     blobfmt.IOBinding("y", "float32", (1,), False)),
        engine_kind="reference")
    tracemalloc.start()
    try:
        blob = blobfmt.serialize(meta, tensor_bytes(engine))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(blob) < engine.numel() + 8192
    assert peak < engine.numel() + (1 << 20), peak
    parsed = blobfmt.parse(blob)
    assert bytes(parsed.engine) == engine.numpy().tobytes()
    assert blob == blobfmt.serialize(meta, engine.numpy().tobytes())   # same bytes either way
