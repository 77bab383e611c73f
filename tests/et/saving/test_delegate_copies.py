"""Who copies a TensorRT engine's copy-back write in a `.pte`: the delegate,
in the buffer's own (device) memory, whenever it can do it alone; otherwise the program's
write-back, with the op that forces it named at save and by `inspect`. Real TensorRT-RTX engines
built ahead of time here; nothing runs them (no machine here can)."""
from __future__ import annotations

import logging

import pytest
import torch

from rtx_env import compile_rtx, torch_tensorrt_or_skip
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class _State(torch.nn.Module):
    """A state the engine steps: `state = state * 0.5 + x`; subclasses say who else sees it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(1, 8))

    def step(self, x):
        new = self.state * 0.5 + x
        self.state.copy_(new)
        return new


class StateHandedOver(_State):
    def forward(self, x):
        return self.step(x) * 2


class StateReturned(_State):
    """The new state is also the user's output."""

    def forward(self, x):
        return self.step(x)


class StateReadOnTheHost(_State):
    """A PyTorch-run op (`torch_executed_ops`) reads the state beside the engine."""

    def forward(self, x):
        seen = torch.sin(self.state)
        return seen + self.step(x) * 2


def _save(model, path, **settings):
    torch_tensorrt = torch_tensorrt_or_skip()
    args = (torch.randn(1, 8),)
    trt = compile_rtx(model, args, **settings)
    torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=list(args))
    return inspect_pte(path.read_bytes()).method("forward")


def _state(info):
    (b,) = [b for b in info.buffers if b.fqn == "state"]
    return b


@pytest.mark.parametrize("model", [StateHandedOver, StateReturned])
def test_a_state_the_engine_alone_writes_is_copied_by_its_delegate_on_the_device(tmp_path,
                                                                                 model):
    """Whether or not the program also reads the new value (StateReturned hands it to the
    caller): the delegate copies it into the buffer on the device (and hands it out)."""
    info = _save(model(), tmp_path / "m.pte")
    b = _state(info)
    assert (b.kind, b.device, b.program_copy_bytes, b.delegate_copy_bytes, b.host_path) == \
        ("copy_back", "cuda:0", 0, 32, "")
    (d,) = info.delegates
    assert [i for _, i in d.copy_back] == ["b_state"] and d.aliased_io == ()


def test_a_state_host_code_touches_keeps_its_write_back_and_says_why(tmp_path, caplog):
    torch_tensorrt = torch_tensorrt_or_skip()
    args = (torch.randn(1, 8),)
    trt = compile_rtx(StateReadOnTheHost(), args,
                      torch_executed_ops={"torch.ops.aten.sin.default"})
    w = trt.mutation_plan["state"]
    assert w.copier.name == "PROGRAM" and w.reason.endswith(
        "written back by the program: the buffer is also read by PyTorch-run piece "
        "'_run_on_gpu_0' (a copy right after the engine would change what it reads)")
    with caplog.at_level(logging.WARNING, logger="torch_tensorrt_ext"):
        torch_tensorrt.save(trt, str(tmp_path / "m.pte"), output_format="executorch",
                            arg_inputs=list(args))
    info = inspect_pte((tmp_path / "m.pte").read_bytes()).method("forward")
    assert [r.getMessage() for r in caplog.records if "stays in host memory" in r.getMessage()] \
        == ["buffer 'state' stays in host memory, written back by the program (each call stages "
            "it to the engine and fetches its new value); the compiled module's mutation_plan "
            "says why"]
    b = _state(info)
    # host staging in, the new value fetched into a temporary, the write-back: 3 copies, 2 of
    # them across the link
    assert (b.kind, b.device, b.program_copy_bytes, b.program_link_bytes, b.delegate_copy_bytes) \
        == ("copy_back", "cpu", 3 * 32, 2 * 32, 0)
    assert b.host_path == "host kernels touch it or its new value: aten::sin"
    assert all(d.copy_back == () for d in info.delegates)


def test_save_refuses_a_delegate_whose_blob_does_not_record_the_write(tmp_path, monkeypatch):
    """A delegate declared to copy a buffer whose blob does not record the copy (the engine's
    record loses it on its way into the blob — a stand-in for any step that loses it) fails the
    save naming the engine output whose value would be dropped, and no `.pte` is written. (A blob
    that only loses the buffers' names still writes them, by binding: the save's one checker,
    `verify_writes`, reads what the runtime's plan of the blob writes, not the names.)"""
    import dataclasses

    from torch_tensorrt_ext.contracts.blob_checks import BlobError
    from torch_tensorrt_ext.executorch.saving import tensorrt_blob
    real = tensorrt_blob.engine_info
    monkeypatch.setattr(tensorrt_blob, "engine_info",
                        lambda *a, **k: dataclasses.replace(real(*a, **k), copy_back=()))
    with pytest.raises(BlobError) as e:
        _save(StateHandedOver(), tmp_path / "lost.pte")
    assert (str(e.value), e.value.check) == (
        "output binding 'output1' is neither a delegate output, aliased (aliased_io) nor "
        "copy-back (copy_back): its value would be dropped", "output.dropped")
    assert not (tmp_path / "lost.pte").exists()
