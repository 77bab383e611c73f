"""Lowering for a device delegate keeps mutable state on the device: no per-call staging copy of
any buffer (ExecuTorch's default stages every delegate argument). Lowering only: no GPU needed."""
from __future__ import annotations

import pytest
from executorch.exir import schema

from torch_tensorrt_ext import reference
from torch_tensorrt_ext.demo.models import Decoder
from torch_tensorrt_ext.executorch import device_state, lower
from torch_tensorrt_ext.executorch.traffic import mutable_buffers, program_copy_bytes


@pytest.fixture(scope="module")
def declared():
    m = Decoder(layers=1).eval()
    ep, compiled = reference.export_program(m, m.example_args())
    return m, ep, compiled


def test_device_delegate_gets_the_buffers_themselves(declared):
    model, ep, compiled = declared
    et = lower.to_executorch(ep, device="cuda:0")
    assert program_copy_bytes(bytes(et.buffer)) == {w.fqn: 0 for w in compiled.plan}
    plan = et.executorch_program.execution_plan[0]
    for fqn, (_, t) in mutable_buffers(plan).items():
        assert t.extra_tensor_info.device_type == schema.DeviceType.CUDA, fqn
    # user inputs still cross host -> device once (x and pos), the output comes back once
    names = [plan.operators[i.instr_args.op_index].name for c in plan.chains
             for i in c.instructions if isinstance(i.instr_args, schema.KernelCall)]
    assert names.count("et_copy::_h2d_copy") == 2 and names.count("et_copy::_d2h_copy") == 1


def test_without_the_pass_executorch_stages_every_buffer(declared, monkeypatch):
    model, ep, compiled = declared
    monkeypatch.setattr(device_state, "StateOnDevicePass", lambda names, then: then)
    et = lower.to_executorch(ep, device="cuda:0")
    staged = program_copy_bytes(bytes(et.buffer))
    for w in compiled.plan:
        b = model.get_buffer(w.fqn)
        assert staged[w.fqn] == b.numel() * b.element_size(), w.fqn
