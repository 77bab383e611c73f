"""Lowering for a device delegate keeps mutable state on the device: no per-call staging copy of
any buffer (ExecuTorch's default stages every delegate argument). Lowering only: no GPU needed."""
from __future__ import annotations

import pytest
from executorch.exir import schema

from torch_tensorrt_ext import reference
from torch_tensorrt_ext.demo.models import Decoder
from torch_tensorrt_ext.executorch.inspecting.verify_writes import WriteVerifyError
from torch_tensorrt_ext.executorch.saving import config, device_state, lower
from torch_tensorrt_ext.executorch.inspecting.traffic import mutable_buffers, program_copy_bytes

pytestmark = pytest.mark.inspects_pte


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
    """ExecuTorch's default hands the delegate a staged copy of every buffer, so the engines'
    writes land in the copies: the save's one checker of the emitted program refuses it, naming
    the first buffer and the staging; with the check off, the staging is measured (each buffer's
    size, every call)."""
    model, ep, compiled = declared
    monkeypatch.setattr(device_state, "StateOnDevicePass", lambda names, then, resident: then)
    with pytest.raises(WriteVerifyError) as e:
        lower.to_executorch(ep, device="cuda:0")
    assert str(e.value) == (
        "method 'forward': buffer 'layers.0.attn.k_cache' is mutated by the source, but no "
        "instruction of the saved program writes it (no write-back copy, no delegate writing or "
        "copying into its binding): the delegate is handed a host-to-device staged copy of it "
        "(et_copy._h2d_copy), so the engine's write lands in the copy. Compile the model again "
        "with the patched torch_tensorrt.compile, and report this with the program")
    monkeypatch.setattr(config, "verify_writes", lambda program, mutated: None)
    et = lower.to_executorch(ep, device="cuda:0")
    staged = program_copy_bytes(bytes(et.buffer))
    for w in compiled.plan:
        b = model.get_buffer(w.fqn)
        assert staged[w.fqn] == b.numel() * b.element_size(), w.fqn
