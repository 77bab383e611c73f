"""A real AOTInductor compile (CPU) of a module whose buffers are views, through the collector.

AOTInductor's ``pickle_weights`` output pairs each constant's written value with the
``TensorProperties`` of the constant it compiled against. The patched collector must accept the
view buffers' compact clones, and the manifest it records must rebuild constants the compiled
library computes correctly with: the test runs the library on them and compares with eager.
"""
from __future__ import annotations

import pytest
import torch
from torch.export.pt2_archive._package_weights import Weights

from test_cuda_weights_collector import (  # noqa: F401  (fixtures)
    collector_module,
    read_back,
    same_bits,
    stock_collector_module,
)

CPU = 0


class ViewBuffers(torch.nn.Module):
    """Buffers that view larger tensors, and a parameter slicing a fused one."""

    def __init__(self) -> None:
        super().__init__()
        big = torch.arange(32, dtype=torch.float32).reshape(8, 4)
        self.register_buffer("big_rows", big[2:5])  # 48 B at offset 8 of 128 B
        base = torch.arange(80, dtype=torch.float32).reshape(8, 10)
        self.register_buffer("cols", base[:, 1:9])  # strides (10, 1), offset 1
        fused = torch.arange(48, dtype=torch.float32).reshape(12, 4)
        self.q = torch.nn.Parameter(fused[4:8], requires_grad=False)  # keeps the fused storage

    def forward(self, x: torch.Tensor):
        return x[:4] * self.big_rows, x.unsqueeze(1) * self.cols, self.q @ x[:4]


@pytest.fixture(scope="module")
def compiled():
    """(module, input, wrapper .so path, Weights) of one AOTInductor CPU compile."""
    model, x = ViewBuffers(), torch.arange(8, dtype=torch.float32) + 1
    program = torch.export.export(model, (x,))
    options = {  # as executorch's CudaBackend asks, less the CUDA-only ones
        "aot_inductor.package": True,
        "aot_inductor.package_constants_in_so": False,
        "aot_inductor.package_constants_on_disk_format": "pickle_weights",
    }
    with torch.no_grad():
        outputs = torch._inductor.aot_compile(program.module(), (x,), options=options)
    so_path = next(p for p in outputs if isinstance(p, str) and p.endswith(".wrapper.so"))
    (weights,) = [p for p in outputs if isinstance(p, Weights)]
    return model, x, so_path, weights


def materialize(module, weights, directory):
    return module.CudaWeightCollector().materialize(Weights(dict(weights)), str(directory),
                                                    lambda _: CPU)


def rebuilt_constants(artifact, dtypes) -> dict[str, torch.Tensor]:
    out = {}
    for entry in artifact.entries:
        data = artifact.storages[entry.storage_key].to_bytes()
        assert len(data) == entry.storage_nbytes
        out[entry.fqn] = read_back(data, dtypes[entry.fqn], entry.sizes, entry.strides,
                                   entry.storage_offset)
    return out


def run_library(so_path: str, constants: dict[str, torch.Tensor], x: torch.Tensor):
    runner = torch._C._aoti.AOTIModelContainerRunnerCpu(so_path, 1)
    names = runner.get_constant_names_to_original_fqns()
    runner.update_constant_buffer({name: constants[fqn] for name, fqn in names.items()},
                                  False, True, True)
    return runner.run([x])


def test_aoti_hands_the_collector_compact_clones_of_the_view_buffers(compiled):
    _, _, _, weights = compiled
    layout = {
        fqn: (value.untyped_storage().nbytes(), value.storage_offset(), props.storage_size,
              props.offset)
        for fqn, (value, props) in weights.items()
    }
    # value: its storage size and offset; TensorProperties: the original view's
    assert layout == {"big_rows": (48, 0, 128, 8), "cols": (312, 0, None, 1),
                      "q": (192, 16, 192, 16)}


def test_patched_collector_accepts_and_rebuilds_every_constant_exactly(compiled, collector_module,
                                                                        tmp_path):
    model, x, so_path, weights = compiled
    artifact = materialize(collector_module, weights, tmp_path)
    entries = {e.fqn: (e.storage_nbytes, e.storage_offset, e.strides) for e in artifact.entries}
    assert entries == {
        "big_rows": (48, 0, (4, 1)),  # the clone's span, never the 128-B base
        "cols": (312, 0, (10, 1)),
        "q": (192, 16, (4, 1)),  # a parameter keeps its own storage and offset
    }
    state = dict(model.state_dict())
    constants = rebuilt_constants(artifact, {k: v.dtype for k, v in state.items()})
    for fqn, value in state.items():
        assert same_bits(constants[fqn], value), fqn
    out = run_library(so_path, constants, x)
    for got, want in zip(out, model(x), strict=False):
        assert same_bits(got, want)
    for data in artifact.storages.values():
        data.close()


def test_low_memory_compacted_clones_run_correctly(compiled, collector_module, tmp_path):
    """Low-memory mode's ``.cpu()`` compacts ``cols`` to strides (8, 1): the collector writes it
    back in the compiled strides, and the library computes eager's result with it."""
    model, x, so_path, weights = compiled
    low_memory = {fqn: (value.clone(), props) for fqn, (value, props) in weights.items()}
    assert low_memory["cols"][0].stride() == (8, 1)
    artifact = materialize(collector_module, low_memory, tmp_path)
    (cols,) = [e for e in artifact.entries if e.fqn == "cols"]
    assert (cols.strides, cols.storage_nbytes) == ((10, 1), 312)
    state = dict(model.state_dict())
    constants = rebuilt_constants(artifact, {k: v.dtype for k, v in state.items()})
    for got, want in zip(run_library(so_path, constants, x), model(x), strict=False):
        assert same_bits(got, want)
    for data in artifact.storages.values():
        data.close()


def test_the_library_reads_constants_through_its_compiled_strides(compiled):
    """Why a compacted clone is not recorded with its own strides: the kernels ignore them."""
    model, x, so_path, weights = compiled
    constants = {fqn: value for fqn, (value, _) in weights.items()}
    constants["cols"] = constants["cols"].clone()  # (8, 1): same values, other layout
    got = run_library(so_path, constants, x)[1]
    assert torch.equal(constants["cols"], model.cols)
    assert not torch.equal(got, model(x)[1])


@pytest.mark.parametrize(
    "fqn, message",
    [
        ("big_rows", "AOTI cloned storage is smaller than its TensorProperties (48 < 128 bytes)"),
        ("cols", "AOTI view 'cols' requires 316 bytes from a 312-byte cloned storage"),
    ],
)
def test_stock_collector_rejects_the_same_compile(compiled, stock_collector_module, tmp_path, fqn,
                                                  message):
    _, _, _, weights = compiled
    with pytest.raises(RuntimeError) as caught:
        materialize(stock_collector_module, {fqn: weights[fqn]}, tmp_path)
    assert str(caught.value) == message
