"""The patched CUDA weight collector on AOTInductor's ``(value, TensorProperties)`` pairs.

Every accepted weight is checked the way the CUDA runtime uses it: the bytes written, read back
through the manifest's sizes/strides/offset, must reproduce the weight bit for bit.
"""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch._inductor.utils import clone_preserve_strides
from torch.export.pt2_archive._package_weights import TensorProperties, Weights

from test_cuda_weights_collector import (  # noqa: F401  (fixtures)
    collector_module,
    decode_manifest,
    read_back,
    same_bits,
    stock_collector_module,
)
from torch_tensorrt_ext.cuda import LayoutSource, weight_layout

CPU = 0


@pytest.fixture(autouse=True)
def _no_host_trim(monkeypatch, collector_module, stock_collector_module):
    """``trim_host_memory`` (gc + malloc_trim, ~0.25 s a call) has no bearing on these tests."""
    for module in (collector_module, stock_collector_module):
        monkeypatch.setattr(module, "trim_host_memory", lambda: None)


def materialize(module, weights: dict, directory):
    return module.CudaWeightCollector().materialize(Weights(weights), str(directory), lambda _: CPU)


def close(artifact) -> None:
    for data in artifact.storages.values():
        data.close()


def written(artifact, fqn: str):
    (entry,) = [entry for entry in artifact.entries if entry.fqn == fqn]
    return entry, artifact.storages[entry.storage_key].to_bytes()


def rebuilt(artifact, fqn: str, dtype: torch.dtype) -> torch.Tensor:
    entry, data = written(artifact, fqn)
    assert len(data) == entry.storage_nbytes
    return read_back(data, dtype, entry.sizes, entry.strides, entry.storage_offset)


def span_nbytes(t: torch.Tensor) -> int:
    if t.numel() == 0:
        return 0
    spread = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    return (spread + 1) * t.element_size()


VIEWS = {
    "contiguous": lambda: torch.arange(32, dtype=torch.float32).reshape(8, 4)[2:5],
    "strided": lambda: torch.arange(80, dtype=torch.float32).reshape(8, 10)[:, 1:9],
    "transposed": lambda: torch.arange(80, dtype=torch.float32).reshape(8, 10)[1:7, 2:9].t(),
    "rank3": lambda: torch.arange(120, dtype=torch.int32).reshape(2, 6, 10)[:, 1:5, 2:7],
    "bf16": lambda: (torch.arange(64) * 0.37 - 5).to(torch.bfloat16).reshape(8, 8)[3:6, ::2],
    "zero_size": lambda: torch.arange(32, dtype=torch.float32).reshape(8, 4)[3:3],
}


@pytest.mark.parametrize("kind", list(VIEWS))
def test_compact_clone_of_a_view_is_written_as_the_clone_and_reads_back_exactly(
    kind, collector_module, tmp_path
):
    view = VIEWS[kind]()
    clone = clone_preserve_strides(view)
    artifact = materialize(collector_module, {"layers.0.buf": (clone, TensorProperties(view))},
                           tmp_path)
    entry, data = written(artifact, "layers.0.buf")

    assert data == bytes(clone.untyped_storage())  # exactly the clone, never the base
    assert entry.storage_nbytes == len(data) == span_nbytes(view)
    assert entry.storage_offset == 0  # the clone's offset, not the view's
    assert (entry.sizes, entry.strides) == (tuple(view.shape), tuple(view.stride()))
    assert same_bits(rebuilt(artifact, "layers.0.buf", view.dtype), view)
    close(artifact)


def test_the_seen_figures_big_2_5_and_base_cols_1_9(collector_module, tmp_path):
    big = torch.arange(32, dtype=torch.float32).reshape(8, 4)
    base = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    contiguous, strided = big[2:5], base[:, 1:3]
    weights = {
        "contiguous": (clone_preserve_strides(contiguous), TensorProperties(contiguous)),
        "strided": (clone_preserve_strides(strided), TensorProperties(strided)),
    }
    artifact = materialize(collector_module, weights, tmp_path)
    sizes = {e.fqn: (e.storage_nbytes, e.storage_offset) for e in artifact.entries}
    assert sizes == {"contiguous": (48, 0), "strided": (232, 0)}
    assert same_bits(rebuilt(artifact, "contiguous", torch.float32), contiguous)
    assert same_bits(rebuilt(artifact, "strided", torch.float32), strided)
    close(artifact)


@pytest.mark.parametrize(
    "kind, message",
    [
        ("contiguous", "AOTI cloned storage is smaller than its TensorProperties (48 < 128 bytes)"),
        ("strided", "AOTI view 'buf' requires 236 bytes from a 232-byte cloned storage"),
    ],
)
def test_stock_collector_rejects_compact_clones(kind, message, stock_collector_module, tmp_path):
    view = {
        "contiguous": torch.arange(32, dtype=torch.float32).reshape(8, 4)[2:5],
        "strided": torch.arange(64, dtype=torch.float32).reshape(8, 8)[:, 1:3],
    }[kind]
    with pytest.raises(RuntimeError) as caught:
        materialize(stock_collector_module,
                    {"buf": (clone_preserve_strides(view), TensorProperties(view))}, tmp_path)
    assert str(caught.value) == message


def test_manifest_round_trip_rebuilds_every_view(collector_module, tmp_path):
    views = {name: make() for name, make in VIEWS.items()}
    weights = {name: (clone_preserve_strides(v), TensorProperties(v)) for name, v in views.items()}
    artifact = materialize(collector_module, weights, tmp_path)
    so_key, entries = decode_manifest(
        collector_module.encode_cuda_weight_metadata("so-key", artifact.entries)
    )
    assert so_key == "so-key" and [e["fqn"] for e in entries] == list(views)
    for entry in entries:
        data = artifact.storages[entry["storage_key"]].to_bytes()
        assert len(data) == entry["storage_nbytes"]
        view = views[entry["fqn"]]
        got = read_back(data, view.dtype, entry["sizes"], entry["strides"], entry["storage_offset"])
        assert same_bits(got, view), entry["fqn"]
    close(artifact)


# -- rejections --------------------------------------------------------------------------------


def _rejects(module, weights: dict, directory, message: str) -> None:
    with pytest.raises(RuntimeError) as caught:
        materialize(module, weights, directory)
        pytest.fail("accepted")
    assert str(caught.value) == message
    assert os.listdir(directory) == []  # validated before anything was written


def test_truncated_compact_clone_is_rejected_on_the_clone_path(collector_module, tmp_path):
    view = torch.arange(32, dtype=torch.float32).reshape(8, 4)[2:5]
    clone = clone_preserve_strides(view)
    clone.untyped_storage().resize_(44)
    # storage offset 0 in the message: the clone's offset, so the clone path ran the check
    _rejects(
        collector_module,
        {"ok": (torch.ones(2), None), "layers.1.buf": (clone, TensorProperties(view))},
        tmp_path,
        "CUDA weight 'layers.1.buf': its view (sizes (3, 4), strides (4, 1), storage offset 0) "
        "requires 48 bytes from a 44-byte cloned storage; the value AOTInductor returned does "
        "not hold every byte of the view",
    )
    assert weight_layout("x", clone_preserve_strides(view), TensorProperties(view)).source is (
        LayoutSource.COMPACT_CLONE
    )


def test_truncated_strided_clone_is_rejected(collector_module, tmp_path):
    view = torch.arange(80, dtype=torch.float32).reshape(8, 10)[:, 1:9]
    clone = clone_preserve_strides(view)
    clone.untyped_storage().resize_(308)
    _rejects(
        collector_module,
        {"s": (clone, TensorProperties(view))},
        tmp_path,
        "CUDA weight 's': its view (sizes (8, 8), strides (10, 1), storage offset 0) requires "
        "312 bytes from a 308-byte cloned storage; the value AOTInductor returned does not "
        "hold every byte of the view",
    )


def test_clone_with_bytes_past_its_view_is_rejected(collector_module, tmp_path):
    view = torch.arange(32, dtype=torch.float32).reshape(8, 4)[2:5]
    clone = clone_preserve_strides(view)
    clone.untyped_storage().resize_(56)
    _rejects(
        collector_module,
        {"layers.2.buf": (clone, TensorProperties(view))},
        tmp_path,
        "CUDA weight 'layers.2.buf': its compact clone has 8 bytes past its view (the view ends "
        "at byte 48 of a 56-byte storage); AOTInductor's clone of a view spans its storage "
        "exactly, so this value is not one",
    )


def _props(shape, stride, offset, storage_size=None, storage_ptr=None):
    return SimpleNamespace(
        shape=shape, stride=stride, offset=offset, storage_size=storage_size,
        storage_ptr=storage_ptr
    )


HINT = ("; its TensorProperties must describe a real view (sizes and strides of equal rank, "
        "nothing negative)")


@pytest.mark.parametrize(
    "props, what",
    [
        (_props((3, 4), (4, 1), -1), "storage offset -1 is negative"),
        (_props((3, -4), (4, 1), 0), "sizes (3, -4) contain a negative size"),
        (_props((3, 4), (4, -1), 0), "strides (4, -1) contain a negative stride"),
        (_props((3, 4), (4, 1, 1), 0),
         "sizes (3, 4) have rank 2 but strides (4, 1, 1) have rank 3"),
    ],
)
def test_invalid_metadata_is_rejected_before_anything_is_written(
    props, what, collector_module, tmp_path
):
    _rejects(
        collector_module,
        {"first": (torch.ones(3), None), "layers.3.buf": (torch.ones(3, 4), props)},
        tmp_path,
        f"CUDA weight 'layers.3.buf' has invalid tensor metadata: {what}{HINT}",
    )


def test_described_storage_larger_than_the_value_is_rejected(collector_module, tmp_path):
    _rejects(
        collector_module,
        {"w": (torch.ones(3, 4), _props((3, 4), (4, 1), 0, storage_size=1024))},
        tmp_path,
        "CUDA weight 'w': AOTI cloned storage is smaller than its TensorProperties (48 < 1024 "
        "bytes); the value AOTInductor returned does not hold the storage its TensorProperties "
        "describe",
    )


def test_stock_collector_leaks_the_rejected_weights_file(stock_collector_module, tmp_path):
    """What the patch fixes: 1.5.1 writes the storage, then checks the metadata."""
    with pytest.raises(RuntimeError,
                       match=r"^AOTI view 'bad' has invalid tensor metadata$") as caught:
        materialize(stock_collector_module,
                    {"bad": (torch.ones(3, 4), _props((3, 4), (4, 1), -1))}, tmp_path)
    assert len(os.listdir(tmp_path)) == 1  # held by the failed call's frame
    del caught


# -- everything else stays on the described-view path ------------------------------------------


def test_parameter_slices_of_a_fused_tensor_keep_their_own_offset(collector_module, tmp_path):
    fused = torch.arange(48, dtype=torch.float32).reshape(12, 4)
    q, k, v = fused[0:4], fused[4:8], fused[8:12]
    cols = fused[:, 1:3]
    weights = {n: (t, TensorProperties(t))
               for n, t in {"q": q, "k": k, "v": v, "cols": cols}.items()}
    artifact = materialize(collector_module, weights, tmp_path)
    layout = {e.fqn: (e.storage_offset, e.storage_nbytes, e.strides) for e in artifact.entries}
    assert layout == {
        "q": (0, 192, (4, 1)),
        "k": (16, 192, (4, 1)),
        "v": (32, 192, (4, 1)),
        "cols": (1, 192, (4, 1)),
    }
    for name, t in {"q": q, "k": k, "v": v, "cols": cols}.items():
        assert written(artifact, name)[1] == bytes(fused.untyped_storage())
        assert same_bits(rebuilt(artifact, name, torch.float32), t)
    close(artifact)


def test_value_sharing_the_described_storage_keeps_the_described_offset(collector_module, tmp_path):
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    view = base[:, 1:]
    artifact = materialize(collector_module, {"view": (base, TensorProperties(view))}, tmp_path)
    entry, _ = written(artifact, "view")
    assert (entry.storage_offset, entry.sizes, entry.strides) == (1, (3, 3), (4, 1))
    assert same_bits(rebuilt(artifact, "view", torch.float32), view)
    close(artifact)


def test_same_shape_other_strides_is_not_taken_for_a_clone(collector_module, tmp_path):
    view = torch.arange(12, dtype=torch.float32).reshape(3, 4)[1:].t()  # (4, 2), (1, 4), offset 4
    value = torch.arange(100, 112, dtype=torch.float32).reshape(6, 2)[:4]  # (4, 2), (2, 1)
    assert weight_layout("t", value, TensorProperties(view)).source is LayoutSource.DESCRIBED_VIEW
    artifact = materialize(collector_module, {"t": (value, TensorProperties(view))}, tmp_path)
    entry, data = written(artifact, "t")
    assert (entry.storage_offset, entry.sizes, entry.strides) == (4, (4, 2), (1, 4))
    assert data == bytes(value.untyped_storage())
    close(artifact)


def test_weights_without_properties_describe_themselves(collector_module, tmp_path):
    zeros = torch.zeros(30, dtype=torch.float16)[:24].as_strided((3, 4), (8, 2), 0)
    artifact = materialize(collector_module, {"kv": (zeros, None)}, tmp_path)
    entry, _ = written(artifact, "kv")
    assert (entry.storage_offset, entry.sizes, entry.strides, entry.storage_nbytes) == \
        (0, (3, 4), (8, 2), 60)
    close(artifact)


# -- low-memory mode: .cpu() compacts a strided clone ------------------------------------------


def low_memory_clone(view: torch.Tensor) -> torch.Tensor:
    """What low-memory mode writes: ``clone_preserve_strides(view).cpu()`` of a CUDA view.

    ``.cpu()`` copies with ``preserve_format``, which keeps a dense layout and closes gaps; a CPU
    ``.clone()`` follows the same rule, so this reproduces it without a GPU.
    """
    return clone_preserve_strides(view).clone()


LOW_MEMORY_VIEWS = {
    "rows_cols": lambda: torch.arange(80, dtype=torch.float32).reshape(8, 10)[:6, 1:9],
    "transposed": lambda: torch.arange(80, dtype=torch.float32).reshape(8, 10)[:, 1:9].t(),
    "rank3_bf16": lambda: torch.arange(120).to(torch.bfloat16).reshape(2, 6, 10)[:, 1:5, 2:7],
}


def test_low_memory_compaction_matches_the_seen_figures():
    view = LOW_MEMORY_VIEWS["rows_cols"]()
    assert (view.stride(), span_nbytes(view)) == ((10, 1), 232)
    compacted = low_memory_clone(view)
    assert (compacted.stride(), compacted.untyped_storage().nbytes()) == ((8, 1), 192)


def zero_gap_span(view: torch.Tensor) -> bytes:
    """The view's span (offset 0) in its own strides, every byte outside the view zero."""
    storage = torch.zeros(span_nbytes(view) // view.element_size(), dtype=view.dtype)
    storage.as_strided(view.shape, view.stride()).copy_(view)
    return bytes(storage.view(torch.uint8).numpy())


@pytest.mark.parametrize("kind", list(LOW_MEMORY_VIEWS))
def test_low_memory_compacted_clone_is_written_in_the_compiled_strides(
    kind, collector_module, tmp_path
):
    view = LOW_MEMORY_VIEWS[kind]()
    compacted = low_memory_clone(view)
    assert compacted.stride() != view.stride()
    assert weight_layout("buf", compacted, TensorProperties(view)).source is \
        LayoutSource.COMPACTED_CLONE
    artifact = materialize(collector_module, {"buf": (compacted, TensorProperties(view))}, tmp_path)
    entry, data = written(artifact, "buf")
    # the manifest describes the bytes written, in the strides the kernels were compiled for
    assert (entry.sizes, entry.strides, entry.storage_offset) == \
        (tuple(view.shape), view.stride(), 0)
    assert entry.storage_nbytes == len(data) == span_nbytes(view)
    assert data == zero_gap_span(view)
    assert same_bits(rebuilt(artifact, "buf", view.dtype), view)
    close(artifact)


def test_low_memory_figures_232_bytes_not_192(collector_module, tmp_path):
    view = LOW_MEMORY_VIEWS["rows_cols"]()
    artifact = materialize(
        collector_module, {"buf": (low_memory_clone(view), TensorProperties(view))}, tmp_path
    )
    entry, data = written(artifact, "buf")
    assert (entry.strides, entry.storage_nbytes, len(data)) == ((10, 1), 232, 232)
    close(artifact)


def test_truncated_low_memory_clone_is_rejected(collector_module, tmp_path):
    view = LOW_MEMORY_VIEWS["rows_cols"]()
    compacted = low_memory_clone(view)
    compacted.untyped_storage().resize_(188)
    _rejects(
        collector_module,
        {"buf": (compacted, TensorProperties(view))},
        tmp_path,
        "CUDA weight 'buf': its view (sizes (6, 8), strides (8, 1), storage offset 0) requires "
        "192 bytes from a 188-byte cloned storage; the value AOTInductor returned does not hold "
        "every byte of the view",
    )


def test_broadcast_view_is_never_taken_for_a_compacted_clone(collector_module):
    view = torch.arange(10, dtype=torch.float32).expand(3, 10)  # stride 0: elements overlap
    dense = view.clone()  # what .cpu() makes of it: (10, 1), 120 bytes
    assert dense.stride() == (10, 1)
    layout = weight_layout("b", dense, TensorProperties(view))
    assert layout.source is LayoutSource.DESCRIBED_VIEW
    assert (layout.strides, layout.storage_nbytes) == ((0, 1), 120)


def test_stock_collector_rejects_the_low_memory_clone(stock_collector_module, tmp_path):
    view = LOW_MEMORY_VIEWS["rows_cols"]()
    with pytest.raises(RuntimeError) as caught:
        materialize(stock_collector_module,
                    {"buf": (low_memory_clone(view), TensorProperties(view))}, tmp_path)
    assert str(caught.value) == "AOTI view 'buf' requires 236 bytes from a 192-byte cloned storage"


# -- any view ------------------------------------------------------------------------------------


@st.composite
def views(draw):
    rank = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 6)) for _ in range(rank)]
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.uint8]))
    base = torch.arange(torch.Size(shape).numel()).reshape(shape).to(dtype)
    index = []
    for n in shape:
        start = draw(st.integers(0, n - 1))
        stop = draw(st.integers(start, n))
        index.append(slice(start, stop, draw(st.integers(1, 3))))
    view = base[tuple(index)]
    return view.permute(*draw(st.permutations(range(rank))))


@settings(max_examples=60, deadline=None)
@given(view=views(), compact=st.booleans())
def test_any_view_clone_reads_back_exactly(tmp_path_factory, collector_module, view, compact):
    value = low_memory_clone(view) if compact else clone_preserve_strides(view)
    directory = tmp_path_factory.mktemp("any")
    artifact = materialize(collector_module, {"buf": (value, TensorProperties(view))}, directory)
    entry, data = written(artifact, "buf")
    if weight_layout("buf", value, TensorProperties(view)).source is LayoutSource.COMPACTED_CLONE:
        assert data == zero_gap_span(view)
    else:
        assert data == bytes(value.untyped_storage())
    assert (entry.sizes, entry.strides) == (tuple(view.shape), view.stride())
    assert same_bits(rebuilt(artifact, "buf", view.dtype), view)
    close(artifact)
