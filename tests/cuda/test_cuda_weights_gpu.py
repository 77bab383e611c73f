"""GPU: lower a module with view buffers through executorch's CudaPartitioner and run it.

The buffers must be views *on the device* when exported: ``move_to_device_pass`` copies CPU
tensors to compact CUDA tensors, which hides the bug; a model built on the GPU keeps its views,
and AOTInductor then hands the collector compact clones with the views' TensorProperties.

The executorch 1.5.1 wheel ships no CUDA delegate runtime, so the lowered program is run the way
that runtime would run it: the delegate's AOTInductor library, with its constants rebuilt from
the manifest (``processed_bytes``) and the named data the collector wrote.
"""
from __future__ import annotations

import os
import tempfile

import pytest
import torch

from test_cuda_weights_collector import (  # noqa: F401  (fixtures)
    collector_module,
    decode_manifest,
    read_back,
    same_bits,
    stock_collector_module,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


class DeviceViewBuffers(torch.nn.Module):
    def __init__(self, device: str) -> None:
        super().__init__()
        big = torch.arange(32, dtype=torch.float32, device=device).reshape(8, 4)
        self.register_buffer("big_rows", big[2:5])
        base = torch.arange(80, dtype=torch.float32, device=device).reshape(8, 10)
        self.register_buffer("cols", base[:, 1:9])
        self.register_buffer("cols_t", base[1:7, 2:9].t())

    def forward(self, x: torch.Tensor):
        return x[:4] * self.big_rows, x.unsqueeze(1) * self.cols, self.cols_t @ x[:6]


def _lower(model, x, collector_class, monkeypatch):
    from executorch.backends.cuda import cuda_backend
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    monkeypatch.setattr(cuda_backend, "CudaWeightCollector", collector_class)
    specs = [
        cuda_backend.CudaBackend.generate_method_name_compile_spec("forward"),
        CompileSpec("max_autotune", b"OFF"),
    ]
    program = torch.export.export(model, (x,), strict=True)
    return to_edge_transform_and_lower(
        program,
        partitioner=[CudaPartitioner(specs)],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )


def _lowered_modules(edge):
    gm = edge.exported_program().graph_module
    return [m for _, m in gm.named_children() if hasattr(m, "processed_bytes")]


def _named_bytes(output, key: str) -> bytes:
    entry = output.pte_data.get(key)
    if entry is None:
        entry = next(d[key] for d in output.external_data.values() if key in d)
    buffer = output.buffers[entry.buffer_index]
    return buffer if isinstance(buffer, bytes) else buffer.to_bytes()


@pytest.fixture(scope="module")
def model_and_input():
    torch.manual_seed(0)
    return DeviceViewBuffers("cuda"), torch.arange(8, dtype=torch.float32, device="cuda") + 1


def test_cuda_partitioner_lowers_device_view_buffers_and_the_program_runs(
    model_and_input, collector_module, monkeypatch
):
    pytest.importorskip("executorch.backends.cuda.cuda_partitioner")
    model, x = model_and_input
    edge = _lower(model, x, collector_module.CudaWeightCollector, monkeypatch)
    (lowered,) = _lowered_modules(edge)
    so_key, entries = decode_manifest(lowered.processed_bytes)
    output = lowered.named_data_store_output
    by_fqn = {e["fqn"]: e for e in entries}
    state = dict(model.named_buffers())
    assert set(by_fqn) == set(state)
    dtypes = {6: torch.float32, 15: torch.bfloat16, 5: torch.float16, 4: torch.int64,
              3: torch.int32}
    constants = {
        e["fqn"]: read_back(
            _named_bytes(output, e["storage_key"]), dtypes[e["dtype"]], e["sizes"], e["strides"],
            e["storage_offset"], device="cuda",
        )
        for e in entries
    }
    for fqn, value in state.items():
        e = by_fqn[fqn]
        data = _named_bytes(output, e["storage_key"])
        assert len(data) == e["storage_nbytes"]
        assert tuple(e["sizes"]) == tuple(value.shape)
        # The manifest's strides are those of the constant AOTInductor compiled against (on the
        # GPU they can be the compact ones); the run below is what proves the kernels agree.
        rebuilt = read_back(data, value.dtype, e["sizes"], e["strides"], e["storage_offset"])
        assert same_bits(rebuilt, value.cpu()), fqn
    assert by_fqn["big_rows"]["storage_nbytes"] == 48  # the clone, not the 128-B base

    with tempfile.TemporaryDirectory() as directory:
        so_path = os.path.join(directory, "forward.so")
        with open(so_path, "wb") as f:
            f.write(_named_bytes(output, so_key))
        try:
            runner = torch._C._aoti.AOTIModelContainerRunnerCuda(so_path, 1)
        except Exception as error:  # the library wants executorch's CUDA shim runtime
            pytest.skip(f"the delegate's AOTI library does not load into torch: {error}")
        names = runner.get_constant_names_to_original_fqns()
        runner.update_constant_buffer({n: constants[f] for n, f in names.items()},
                                      False, True, True)
        got = runner.run([x])
    for g, want in zip(got, model(x), strict=False):
        assert torch.equal(g.cpu(), want.cpu())


def test_stock_collector_rejects_device_view_buffers(model_and_input, stock_collector_module,
                                                     monkeypatch):
    pytest.importorskip("executorch.backends.cuda.cuda_partitioner")
    model, x = model_and_input
    with pytest.raises(Exception) as caught:
        _lower(model, x, stock_collector_module.CudaWeightCollector, monkeypatch)
    assert "cloned storage" in str(caught.value)
