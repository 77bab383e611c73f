"""`contracts.target_device.parse_target_device`: the one reader of a device string, used by the
reference and TensorRT delegates' blobs and the shared-state planner."""
from __future__ import annotations

import pytest

from torch_tensorrt_ext.contracts.target_device import parse_target_device
from torch_tensorrt_ext.errors import UsageError


@pytest.mark.parametrize("text, want", [("cpu", ("cpu", None)), ("cuda", ("cuda", None)),
                                        ("cuda:0", ("cuda", 0)), (" CUDA:3 ", ("cuda", 3))])
def test_reads_kind_and_index(text, want):
    assert parse_target_device(text) == want


@pytest.mark.parametrize("text", ["", "gpu:0", "cuda:", "cuda:x", "cuda:-1", "cuda:0:1", "npu"])
def test_refuses_naming_the_text(text):
    with pytest.raises(UsageError, match=f"target device {text!r}"):
        parse_target_device(text)


def test_the_reference_delegate_and_the_planner_read_the_same_index():
    from torch_tensorrt_ext.executorch.saving.shared_arenas import parse_device
    from executorch.exir.schema import DeviceType
    assert parse_device("cuda:2") == (int(DeviceType.CUDA), 2)
    assert parse_device("cpu") == (int(DeviceType.CPU), 0)
    with pytest.raises(UsageError):
        parse_device("cuda:one")
