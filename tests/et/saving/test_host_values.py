"""Values ExecuTorch's emitter serializes are read from host memory only.

The emitter dereferences each constant's and each initialised buffer's storage pointer on the
host. What runs here: a program already in host memory is handed on untouched, and a tensor with
no value (the meta device — the emitter would dereference a null pointer) is refused naming it,
through the lowering model authors reach. The CUDA branch (each device tensor replaced by its
`Tensor.cpu()` copy) cannot run here: `scripts/device_host_values.py` runs it on the GPU machine,
with a model exported on CUDA, beside the emitter's own way of reading a value (which kills the
process on a CUDA tensor)."""
from __future__ import annotations

import pytest
import torch

from torch_tensorrt_ext.contracts.plan import PlanError
from torch_tensorrt_ext.executorch.saving.host_values import host_values


class Stateful(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("state", torch.zeros(1, 4))

    def forward(self, x):
        self.state.add_(x)
        return self.lin(self.state)


def test_a_program_in_host_memory_is_handed_on_as_it_is():
    ep = torch.export.export(Stateful(), (torch.ones(1, 4),))
    assert host_values(ep) is ep
    both = {"prefill": ep, "decode": ep}
    assert host_values(both) == both


def test_a_value_on_the_meta_device_is_refused_naming_it_before_the_emitter_reads_it():
    with torch.device("meta"):
        model = Stateful()
    ep = torch.export.export(model, (torch.ones(1, 4, device="meta"),))
    with pytest.raises(PlanError) as e:
        host_values(ep)
    assert str(e.value) == (
        "'lin.weight' is a meta tensor: it has no value to write into the .pte; materialise the "
        "model's weights and buffers (load a checkpoint, or to_empty() and initialise them) "
        "before exporting")


def test_the_lowering_users_reach_refuses_it_too(tmp_path):
    from torch_tensorrt_ext.executorch.saving import lower
    with torch.device("meta"):
        model = Stateful()
    ep = torch.export.export(model, (torch.ones(1, 4, device="meta"),))
    with pytest.raises(PlanError, match="'lin.weight' is a meta tensor"):
        lower.save_pte(ep, str(tmp_path / "m.pte"))
    assert not (tmp_path / "m.pte").exists()
