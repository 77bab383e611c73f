"""The product path with state in device memory, on CPU CI: `.pte` files saved with reference
engines on `cuda:0` are stepped by the C++ runner (`tte_run`, ExecuTorch's Module API) on the
emulated device, whose memory faults on any host access. Device arenas come from the runtime's
`DeviceAllocator`, initial values reach them through it, KV writes stay in place, copy-back
buffers are copied once by the delegate — and every output equals eager, step after step.

What this cannot show (no GPU here): real CUDA pointers and streams; the runner takes
`--device cuda` on a GPU machine: the GPU tier, tests/gpu/test_device_path.py, steps these
cases there."""
from __future__ import annotations

import pytest
import torch
from executorch.exir import schema
from executorch.exir._serialize._program import deserialize_pte_binary
from helpers import buffer_nbytes
from device_cases import DEVICE_CASES, save_case
from runtime_helpers import read_output, run_runner

from torch_tensorrt_ext.contracts.plan import Copier
from torch_tensorrt_ext.executorch.inspecting.traffic import mutable_buffers

STEPS = 4


# one method each (the two-method case, one cache across methods:
# tests/et/saving/test_shared_arenas.py)
CASES = {n: c for n, c in DEVICE_CASES.items() if list(c.methods) == ["forward"]}


def _saved(tmp_path, name, steps: int = STEPS):
    return save_case(tmp_path, name, steps)


@pytest.mark.parametrize("name", sorted(CASES))
def test_state_on_the_emulated_device_steps_like_eager(tmp_path, name):
    eager, plan, data = _saved(tmp_path, name)
    done, summary = run_runner(tmp_path / "m.pte", tmp_path, STEPS, "emulated", "--reset")
    assert done.returncode == 0, done.stderr[-2000:]
    for s in range(STEPS):
        want = CASES[name].call_eager(eager, s)
        want = want if isinstance(want, (tuple, list)) else (want,)
        for j, w in enumerate(want):
            torch.testing.assert_close(read_output(tmp_path, s, j, w), w,
                                       msg=lambda m: f"{name} step {s} output {j}: {m}")
    # where each buffer lives, and what the delegate copied: KV nothing, an engine-copied
    # buffer its size once per call (a device-to-device copy); program-copied state keeps a
    # host path (ExecuTorch's write-back is a host kernel), which the delegate never copies
    method = next(p for p in deserialize_pte_binary(data).program.execution_plan
                  if p.name == "forward")
    placed = {f: t.extra_tensor_info.device_type for f, (_, t) in mutable_buffers(method).items()}
    assert summary["device"] == "emulated"
    for w in plan:
        engine_copied = w.copier is Copier.ENGINE and not w.is_kv
        assert summary["copy_bytes"][w.fqn] == (STEPS * buffer_nbytes(eager, w.fqn)
                                                if engine_copied else 0), w.fqn
        want_device = schema.DeviceType.CUDA if w.copier is Copier.ENGINE else schema.DeviceType.CPU
        assert placed[w.fqn] == want_device, (w.fqn, w.copier)
    for fqn, (device, link, host) in summary["copy_paths"].items():   # all device to device
        assert (device, link, host) == (summary["copy_bytes"][fqn], 0, 0), fqn
    assert summary["staging_bytes"] > 0   # the reference engine ran "on the device"
    assert summary["reset"] is True       # reset, the same steps again: identical outputs


def test_the_runner_refuses_device_state_without_a_device(tmp_path):
    _saved(tmp_path, "kv_index_copy")
    done, _ = run_runner(tmp_path / "m.pte", tmp_path, 1, "none")
    assert done.returncode == 3
    assert done.stderr.strip().endswith(
        "m.pte: method 'forward': memory arena 1 lives on cuda:0, where the program keeps its "
        "state (its buffers: 'k'), but no device is in force: load it on a GPU machine (device "
        "'cuda'), or with the emulated device to test on CPU")
    assert not list(tmp_path.glob("out.*"))


def test_a_callers_stream_needs_a_device_with_streams(tmp_path):
    """`--stream` (a caller's non-blocking stream, tte::use_stream) is a CUDA notion: on the
    emulated device the runner refuses it before loading anything (the GPU run steps every case
    with and without one: tests/gpu/test_device_path.py)."""
    _saved(tmp_path, "kv_index_copy")
    done, _ = run_runner(tmp_path / "m.pte", tmp_path, 1, "emulated", "--stream")
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (
        3, "tte_run: --stream: device emulated has no streams")


class _DecodeAndEmbed(torch.nn.Module):
    """A decode step (a KV write and a counter) and a stateless method between decode steps that
    reads both live (`embed`): the shape of a multi-method case."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(1, 2, 8, 4))
        self.register_buffer("n", torch.zeros(1))

    def forward(self, x, pos):
        self.k.index_copy_(2, pos, x)
        self.n.add_(1)
        return self.k.sum(2) * self.n

    def embed(self, x):
        return x.sum(2) + self.k.sum(2) + self.n


def _decode_or_embed(s: int):
    x = torch.randn(1, 2, 1, 4, generator=torch.Generator().manual_seed(s))
    return ("forward", (x, torch.tensor([s // 2]))) if s % 2 == 0 else ("embed", (x,))


def test_a_case_of_several_methods_is_one_entry(tmp_path, monkeypatch):
    """A case whose steps alternate a decode (`forward`) and a stateless method of the model
    (`method_of("embed")`) is one `DEVICE_CASES` entry: written as a case folder, stepped by the
    runner, every output equals eager — the stateless method reads the state the decode steps
    wrote — and every delegate copy stays on the device, reset + rerun identical."""
    from device_cases import DeviceCase, method_of, write_case
    from device_outputs import eager_mismatches, summary_mismatches
    monkeypatch.setitem(DEVICE_CASES, "decode_and_embed", DeviceCase(
        _DecodeAndEmbed, _decode_or_embed,
        methods={"forward": lambda m: m, "embed": method_of("embed")}))
    write_case(tmp_path, "decode_and_embed", 6)
    assert [(tmp_path / f"method.{s}").read_text() for s in range(4)] == [
        "forward", "embed", "forward", "embed"]
    done, summary = run_runner(tmp_path / "m.pte", tmp_path, 6, "emulated", "--reset")
    assert done.returncode == 0, done.stderr[-2000:]
    assert eager_mismatches(tmp_path, tmp_path)[0] == []
    assert summary_mismatches(tmp_path, summary, reset=True) == []
    # the stateless method saw the state move on (eager's own outputs differ step to step)
    assert (tmp_path / "want.1.0.bin").read_bytes() != (tmp_path / "want.3.0.bin").read_bytes()


def test_drawn_programs_of_several_methods_step_on_the_device_like_eager(tmp_path, monkeypatch):
    """Programs of several methods drawn by method_grammar as device cases (drawn_device_cases:
    their own interleaving of calls, resets left out, state in device memory): every output
    equals eager's, the delegates copy exactly what their blobs say, device to device, for every
    buffer of every method the steps ran — programs whose first call is a stateless method
    included (the runner once listed only the first method's buffers: none) — and reset + rerun
    is identical. The bundle's `--drawn N` carries many more to the GPU tier."""
    from device_cases import write_case
    from drawn_device_cases import drawn_device_cases
    from runtime_helpers import runner_mismatches
    cases = drawn_device_cases(4, 3)   # two with held state (strict); two start with `encode`
    assert len(cases) == 3 and any(c.method(0) == "encode" for c in cases.values())
    for name, case in cases.items():
        monkeypatch.setitem(DEVICE_CASES, name, case)
        write_case(tmp_path / name, name, 8)
        bad, summary = runner_mismatches(tmp_path / name, tmp_path / name, 8)
        assert bad == [], name
        assert summary["copy_bytes"], name    # every drawn program has state
