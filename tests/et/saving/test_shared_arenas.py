"""Several methods, one allocation per buffer, with the state in device memory (`shared_arenas`).

ExecuTorch 1.5.1 shares mutable buffers between methods only for host-only programs. Here a
dynamic prefill (its T-position cache write runs on the host) and a one-token decode (the
reference engine writes the cache itself, on the device) are saved with reference engines on
cuda:0. The save records one device arena that both methods plan the cache in. The runtime
loader allocates it once, and refuses a record that does not match the program. The tests that
load need a device: the emulated-device child runs them (`test_emulated_device.py`), where any
host access to device memory kills the run.
"""
from __future__ import annotations

import copy
import json
import os
import warnings

import pytest
import torch

import torch_tensorrt_ext as tte
from dynamic_models import MAX_T, PrefillCache, prefill_args, prefill_dims
from torch_tensorrt_ext import cli
from torch_tensorrt_ext.executorch.saving import lower
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
from torch_tensorrt_ext.executorch.running.program import PteError, load
from torch_tensorrt_ext.executorch.saving.shared_arenas import RECORD_KEY

pytestmark = pytest.mark.emulated_device

needs_device = pytest.mark.skipif(os.environ.get("TTE_DEVICE") != "emulated",
                                  reason="loads device memory: the emulated-device child runs it")
CACHE = 1 * MAX_T * 8 * 4


def _programs(model):
    prefill = torch.export.export(model, prefill_args(4), dynamic_shapes=prefill_dims())
    decode = torch.export.export(model, prefill_args(1))
    return tte.reference.export_methods({"prefill": (prefill, None), "decode": (decode, None)})


def _save(tmp_path, model, **kw):
    path = str(tmp_path / "pd.pte")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)   # nothing left unshared, nothing warned
        warnings.filterwarnings("ignore", "Mutation on a buffer")   # ExecuTorch's emitter
        lower.save_pte(_programs(model), path, device="cuda:0", **kw)
    return path


def test_the_cache_is_one_device_allocation_in_both_methods(tmp_path, capsys):
    """The record names one cuda:0 arena holding only the cache; each method plans the cache
    there (a planned buffer of exactly the arena's size, on the device), and prefill's host
    write crosses the link once each way."""
    path = _save(tmp_path, PrefillCache().eval())
    info = inspect_pte(open(path, "rb").read())
    (arena,) = info.shared
    assert (arena.device, arena.nbytes, arena.buffers) == ("cuda:0", CACHE, (("k_cache", 0),))
    from torch_tensorrt_ext.executorch.inspecting.traffic import flatbuffer_program
    plans = {p.name: p for p in flatbuffer_program(open(path, "rb").read()).execution_plan}
    for method, index in arena.methods:
        plan = plans[method]
        assert plan.non_const_buffer_sizes[index + 1] == CACHE
        assert any(d.buffer_idx == index + 1 and int(d.device_type) == 1
                   for d in plan.non_const_buffer_device)
        (k,) = [b for b in info.method(method).buffers if b.fqn == "k_cache"]
        assert k.device == "cuda:0" and k.initial_value
    (k,) = info.method("prefill").buffers
    assert (k.program_link_bytes, k.program_copy_bytes) == (2 * CACHE, 2 * CACHE)
    assert k.host_path == "host kernels touch it or its new value: aten::index_put"
    (k,) = info.method("decode").buffers
    assert (k.program_copy_bytes, k.delegate) == (0, 0)
    assert cli.main(["inspect", path]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"state shared by every method: {CACHE} bytes on cuda:0, one allocation: k_cache@0 "
        "(planned buffer " + ", ".join(f"{m}:{i}" for m, i in arena.methods) + ")")


def test_device_state_each_method_holds_apart_is_refused_at_save(tmp_path, monkeypatch):
    """The protection (`config.shares_state`) switched off: each method plans the cache in a
    device arena of its own, so prefill's writes would never reach decode — the whole-program
    check refuses the save, naming the buffer and both methods."""
    from torch_tensorrt_ext.executorch.inspecting.program_state import ProgramStateError
    from torch_tensorrt_ext.executorch.saving import config
    monkeypatch.setattr(config, "shares_state", lambda mutated: False)
    with pytest.raises(ProgramStateError, match=r"^buffer 'k_cache' is not one allocation: "
                       r"method '(decode|prefill)' holds it at its own arena \d+ offset \d+, "
                       r"method '(decode|prefill)' at its own arena \d+ offset \d+; a write by "
                       r"one method would not be seen by the other$"):
        _save(tmp_path, PrefillCache().eval())
    assert not (tmp_path / "pd.pte").exists()


def test_not_sharing_keeps_a_copy_per_method_and_records_nothing(tmp_path):
    path = str(tmp_path / "own.pte")
    lower.save_pte(_programs(PrefillCache().eval()), path, device="cuda:0",
                   share_mutable_buffers=False)
    info = inspect_pte(open(path, "rb").read())
    assert info.shared == ()
    assert info.method("prefill").buffers[0].device == "cpu"   # its host kernels' own copy


def test_host_state_keeps_executorchs_own_sharing(tmp_path):
    """Host-only programs: ExecuTorch's mem_id 2 sharing (stock runtimes read it), no record."""
    path = str(tmp_path / "host.pte")
    lower.save_pte(_programs(PrefillCache().eval()), path, device="cpu")
    from torch_tensorrt_ext.executorch.inspecting.traffic import flatbuffer_program
    info = inspect_pte(open(path, "rb").read())
    assert info.shared == ()
    for plan in flatbuffer_program(open(path, "rb").read()).execution_plan:
        (k,) = [v.val for v in plan.values if getattr(v.val, "extra_tensor_info", None)
                and v.val.extra_tensor_info.fully_qualified_name == "k_cache"]
        assert k.allocation_info.memory_id == 2


@needs_device
def test_decode_continues_from_the_cache_prefill_wrote(tmp_path):
    torch.manual_seed(0)
    model = PrefillCache().eval()
    eager = copy.deepcopy(model)
    prog = load(_save(tmp_path, model), method="decode")
    for prompt in (5, 3):
        prog.reset()
        eager.k_cache.zero_()
        x, pos = prefill_args(prompt)
        with torch.no_grad():
            want = eager(x, pos)
        torch.testing.assert_close(prog.run(x, pos, method="prefill")[0], want)
        for at in range(prompt, prompt + 3):
            x, pos = prefill_args(1, at)
            with torch.no_grad():
                want = eager(x, pos)
            torch.testing.assert_close(prog.run(x, pos)[0], want)
            torch.testing.assert_close(prog.state()["k_cache"], eager.k_cache)


def _with_record(path, tmp_path, edit):
    """The `.pte` at `path` with its record's JSON rewritten by `edit` (same length: the bytes
    are replaced in place, so every offset in the file stays right)."""
    data = bytearray(open(path, "rb").read())
    info = inspect_pte(bytes(data))
    assert info.shared
    start = data.find(b'{"arenas"')
    end = data.find(b'"version": 1}', start) + len(b'"version": 1}')
    text = data[start:end].decode()
    assert json.loads(text)["version"] == 1
    new = edit(text)
    assert len(new) == len(text), (text, new)
    data[start:end] = new.encode()
    out = tmp_path / "edited.pte"
    out.write_bytes(bytes(data))
    return str(out)


@needs_device
@pytest.mark.parametrize("edit,check", [
    (lambda t: t.replace(f'"bytes": {CACHE}', f'"bytes": {CACHE // 2}'),
     rf"method '(decode|prefill)' has no planned buffer \d+ of {CACHE // 2} bytes on cuda:0 for "
     r"arena 0"),
    (lambda t: t.replace('"decode"', '"decade"'),
     r"method 'decode' has no index for each of the 1 arenas"),
    (lambda t: t.replace('"version": 1}', '"version": 2}'),
     r"not a version-1 record of shared state arenas"),
    (lambda t: t.replace('"k_cache": 0', '"k_cache": 8'),
     r"method '(decode|prefill)': buffer 'k_cache' is not in the state arena every method "
     r"shares \(cuda:0, offset 8\)"),
])
def test_a_record_that_does_not_match_the_program_is_refused(tmp_path, edit, check):
    path = _with_record(_save(tmp_path, PrefillCache().eval()), tmp_path, edit)
    with pytest.raises(PteError, match=rf"{RECORD_KEY}: {check}"):
        load(path)


def test_the_runner_steps_prefill_then_decode_on_one_device_cache(tmp_path):
    """`tte_run` (the C++ runner, the emulated device) runs the step's method from
    io_dir/method.<s>: a 4-token prefill, then decodes that read the cache prefill wrote, each
    equal to eager; the decode delegate copies the cache back once per call (512 B), and a reset
    plus rerun gives identical bytes (on a GPU: tests/gpu/test_device_path.py)."""
    from device_cases import (DEVICE_CASES, PREFILL_THEN_DECODE, delegate_copies_over_steps,
                              save_case)
    from runtime_helpers import read_output, run_runner
    steps = 5
    eager, _, _ = save_case(tmp_path, PREFILL_THEN_DECODE, steps)
    done, summary = run_runner(tmp_path / "m.pte", tmp_path, steps, "emulated", "--reset")
    assert done.returncode == 0, done.stderr[-2000:]
    case = DEVICE_CASES[PREFILL_THEN_DECODE]
    assert [(tmp_path / f"method.{s}").read_text() for s in range(steps)] == \
        ["prefill"] + ["decode"] * (steps - 1)
    for s in range(steps):
        want = case.call_eager(eager, s)
        torch.testing.assert_close(read_output(tmp_path, s, 0, want), want,
                                   msg=lambda m: f"step {s}: {m}")
    assert delegate_copies_over_steps(tmp_path / "m.pte", PREFILL_THEN_DECODE, steps) == \
        {"k_cache": (steps - 1) * CACHE}
    assert summary["copy_bytes"] == {"k_cache": (steps - 1) * CACHE}
    assert summary["copy_paths"] == {"k_cache": [(steps - 1) * CACHE, 0, 0]}
    assert summary["reset"] is True


@pytest.mark.parametrize("name", ["prefill_decode_encode", "whisper_shaped"])
def test_the_runner_steps_every_method_of_one_device_state(tmp_path, name):
    """Three methods (a stateless encoder between decode steps) and Whisper's shape (a `fill`
    writing the cross state decodes only read), stepped by `tte_run` on the emulated device:
    every call equal to eager's, with eager's state carried across methods; the encoder copies
    nothing; a reset plus rerun gives identical bytes (on a GPU: tests/gpu/test_device_path.py)."""
    from device_cases import DEVICE_CASES, delegate_copies_over_steps, save_case
    from runtime_helpers import read_output, run_runner
    steps, case = 8, DEVICE_CASES[name]
    eager, _, _ = save_case(tmp_path, name, steps)
    done, summary = run_runner(tmp_path / "m.pte", tmp_path, steps, "emulated", "--reset")
    assert done.returncode == 0, done.stderr[-2000:]
    assert len({case.method(s) for s in range(steps)}) == len(case.methods)
    for s in range(steps):
        want = case.call_eager(eager, s)
        torch.testing.assert_close(read_output(tmp_path, s, 0, want), want,
                                   msg=lambda m: f"step {s} ({case.method(s)}): {m}")
    copied = delegate_copies_over_steps(tmp_path / "m.pte", name, steps)
    assert {f: n for f, n in summary["copy_bytes"].items() if n} == \
        {f: n for f, n in copied.items() if n} != {}
    assert summary["reset"] is True


# --- the planner alone, over hand-made method graphs (what ExecuTorch hands it per method) -------

def _method_graph(buffers, activations: int):
    """A graph taking `buffers` ({placeholder: (fqn, nbytes, device)}) as planned by ExecuTorch
    with `activations` bytes of its own host arena; (graph module, signature, {fqn: spec})."""
    from types import SimpleNamespace
    from executorch.exir.tensor import TensorSpec
    g = torch.fx.Graph()
    specs = {}
    for name, (fqn, nbytes, device) in buffers.items():
        spec = TensorSpec.from_tensor(torch.zeros(nbytes // 4))
        spec.device, spec.device_index = device
        g.placeholder(name).meta["spec"] = specs[fqn] = spec
    g.output(None)
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    gm.meta["non_const_buffer_sizes"] = [0, activations]
    sig = SimpleNamespace(inputs_to_buffers={n: f for n, (f, _, _) in buffers.items()},
                          buffers_to_mutate={f"o_{f}": f for f, _, _ in buffers.values()})
    return gm, sig, specs


def _record(store):
    out = store.get_named_data_store_output()
    return json.loads(bytes(out.buffers[out.pte_data[RECORD_KEY].buffer_index]))


def test_each_buffer_gets_one_offset_in_one_arena_per_device_in_every_method():
    """decode takes both caches, prefill one: both plan `k` at the same offset of the cuda:0
    arena, each at its own planned-buffer index (after its own arenas)."""
    from executorch.exir._serialize._named_data_store import NamedDataStore
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.schema import DeviceType
    from torch_tensorrt_ext.executorch.saving.shared_arenas import planners
    cuda = (DeviceType.CUDA, 0)
    store = NamedDataStore()
    plan = planners(MemoryPlanningPass(), store, ["decode", "prefill"])
    for slot in plan.values():   # as EdgeProgramManager.to_executorch sets it (default True)
        slot.enable_non_cpu_memory_planning = True
    graphs = {"decode": _method_graph({"b_k": ("k", 64, cuda), "b_v": ("v", 40, cuda)}, 32),
              "prefill": _method_graph({"b_k": ("k", 64, cuda)}, 96)}
    graphs["prefill"][0].meta["non_const_buffer_sizes"].append(128)   # a device arena of its own
    for m, (gm, sig, _) in graphs.items():
        plan[m].layout.collect(m, gm, sig)
    plan["decode"].run_multimethod()
    plan["prefill"].run_multimethod()   # once per method slot: planned once
    assert _record(store) == {"version": 1, "arenas": [
        {"device": "cuda:0", "bytes": 64 + 48, "buffers": {"k": 0, "v": 64}}],
        "methods": {"decode": [1], "prefill": [2]}}
    assert graphs["decode"][0].meta["non_const_buffer_sizes"] == [0, 32, 112]
    assert graphs["prefill"][0].meta["non_const_buffer_sizes"] == [0, 96, 128, 112]
    for m, mem_id in (("decode", 2), ("prefill", 3)):
        for fqn, spec in graphs[m][2].items():
            assert (spec.mem_id, spec.mem_offset) == (mem_id, {"k": 0, "v": 64}[fqn])
    assert [(d.buffer_idx, d.device_type) for d in
            graphs["prefill"][0].meta["non_const_buffer_device"]] == [(3, DeviceType.CUDA)]


def test_a_buffer_two_methods_place_on_different_devices_keeps_a_copy_each_and_says_so():
    from executorch.exir._serialize._named_data_store import NamedDataStore
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.schema import DeviceType
    from torch_tensorrt_ext.executorch.saving.shared_arenas import planners
    store = NamedDataStore()
    plan = planners(MemoryPlanningPass(), store, ["a", "b"])
    for slot in plan.values():
        slot.enable_non_cpu_memory_planning = True
    graphs = {"a": _method_graph({"b_k": ("k", 64, (DeviceType.CUDA, 0))}, 16),
              "b": _method_graph({"b_k": ("k", 64, (DeviceType.CUDA, 1))}, 16)}
    for m, (gm, sig, _) in graphs.items():
        plan[m].layout.collect(m, gm, sig)
    with pytest.warns(UserWarning, match=r"buffers placed on different devices by different "
                      r"methods cannot share one allocation; each method keeps its own copy of "
                      r"them: 'k' \(a: cuda:0, b: cuda:1\)"):
        plan["a"].run_multimethod()
    assert _record(store) == {"version": 1, "arenas": [], "methods": {"a": [], "b": []}}
    for m, index in (("a", 0), ("b", 1)):
        gm, _, specs = graphs[m]
        assert gm.meta["non_const_buffer_sizes"] == [0, 16, 64]
        assert (specs["k"].mem_id, specs["k"].mem_offset) == (2, 0)
        assert [(d.buffer_idx, d.device_index) for d in gm.meta["non_const_buffer_device"]] == \
            [(2, index)]


def test_without_device_planning_the_state_shares_one_host_arena():
    """ExecuTorch told to plan every tensor in host memory (enable_non_cpu_memory_planning=
    False) gets the state in one host arena too, whatever device its specs name."""
    from executorch.exir._serialize._named_data_store import NamedDataStore
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.schema import DeviceType
    from torch_tensorrt_ext.executorch.saving.shared_arenas import planners
    store = NamedDataStore()
    plan = planners(MemoryPlanningPass(), store, ["a", "b"])
    graphs = {m: _method_graph({"b_k": ("k", 64, (DeviceType.CUDA, 0))}, 16) for m in "ab"}
    for m, (gm, sig, _) in graphs.items():
        plan[m].layout.collect(m, gm, sig)
    plan["b"].run_multimethod()
    assert _record(store)["arenas"] == [{"device": "cpu", "bytes": 64, "buffers": {"k": 0}}]
    assert all("non_const_buffer_device" not in gm.meta for gm, _, _ in graphs.values())
