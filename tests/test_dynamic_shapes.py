"""Dynamic shapes (issue 19): a prefill whose sequence length is known only at run time, through
`torch_tensorrt.compile` and `torch_tensorrt.save(output_format="executorch")` with reference
engines (run here, against eager, for several lengths, the state carried from call to call) and
with TensorRT-RTX engines built ahead of time (saved here; nothing here runs them)."""
from __future__ import annotations

import copy

import pytest
import torch

import torch_tensorrt_ext as tte
from dynamic_models import (MAX_T, PrefillCache, prefill_args, prefill_dims,
                            prefill_input_specs)
from rtx_env import compile_rtx, torch_tensorrt_or_skip
from torch_tensorrt_ext.executorch import load
from torch_tensorrt_ext.executorch.inspect_pte import inspect_pte
from torch_tensorrt_ext.executorch.method_inputs import InputShapeError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
LENGTHS = (4, 1, 7, 3)   # 15 positions of the 16-position cache, T = 1 among them


def _export(model):
    return torch.export.export(model, prefill_args(4), dynamic_shapes=prefill_dims())


def _compile_reference(model):
    torch_tensorrt = torch_tensorrt_or_skip()
    with tte.reference.engines():
        return torch_tensorrt.compile(_export(model), ir="dynamo", arg_inputs=list(
            prefill_args(4)), min_block_size=1)


def _save_reference(model, path, how):
    torch_tensorrt = torch_tensorrt_or_skip()
    trt = _compile_reference(model)
    kw = (dict(arg_inputs=list(prefill_args(4)), dynamic_shapes=prefill_dims())
          if how == "dynamic_shapes" else dict(arg_inputs=prefill_input_specs(torch_tensorrt)))
    with tte.reference.engines():
        torch_tensorrt.save(trt, str(path), output_format="executorch", **kw)
    return path


def _steps(run, eager, state):
    """Run the prefill lengths in sequence against eager; each output and the cache after it."""
    start = 0
    for t in LENGTHS:
        x, pos = prefill_args(t, start)
        start += t
        with torch.no_grad():
            want = eager(x, pos)
        got = run(x, pos)
        assert tuple(got.shape) == (1, t, 8)
        torch.testing.assert_close(got, want, msg=lambda m: f"T={t}: {m}")
        torch.testing.assert_close(state(), eager.k_cache, msg=lambda m: f"cache after T={t}: {m}")


def test_the_compiled_module_runs_every_length_like_eager():
    torch.manual_seed(0)
    model = PrefillCache().eval()
    eager = copy.deepcopy(model)
    trt = _compile_reference(model)
    _steps(lambda x, p: trt(x, p), eager, lambda: trt.get_buffer("k_cache"))


@pytest.mark.parametrize("how", ["dynamic_shapes", "input_specs"])
def test_the_pte_runs_every_length_like_eager_carrying_its_state(tmp_path, how):
    torch.manual_seed(0)
    model = PrefillCache().eval()
    eager = copy.deepcopy(model)
    prog = load(_save_reference(model, tmp_path / "prefill.pte", how))
    _steps(lambda x, p: prog.run(x, p)[0], eager, lambda: prog.state()["k_cache"])
    # the cache moves once per call, whatever the length: its own size
    assert prog.state_traffic() == {"k_cache": 1 * MAX_T * 8 * 4}


def test_every_dynamic_binding_carries_its_bounds(tmp_path):
    info = inspect_pte(_save_reference(PrefillCache().eval(), tmp_path / "p.pte",
                                       "dynamic_shapes").read_bytes()).method("forward")
    dynamic = {(d.index, n): s for d in info.delegates for n, s in d.max_shapes}
    shapes = {(d.index, b[0]): b[2] for d in info.delegates for b in d.bindings}
    assert dynamic and all(-1 in shapes[k] for k in dynamic)
    assert all(shape == (1, MAX_T, 8) for shape in dynamic.values())
    assert {k for k, s in shapes.items() if -1 in s} == set(dynamic)


def test_a_call_beyond_the_bounds_is_refused_and_changes_nothing(tmp_path):
    torch.manual_seed(0)
    prog = load(_save_reference(PrefillCache().eval(), tmp_path / "p.pte", "dynamic_shapes"))
    prog.run(*prefill_args(4))
    before = prog.state()["k_cache"].clone()
    with pytest.raises(InputShapeError) as e:
        prog.run(*prefill_args(MAX_T + 1))
    assert str(e.value) == (
        "method 'forward': dynamic input 0 takes shapes at most [1, 16, 8]; this call gives "
        "[1, 17, 8] (nothing ran, the state is as it was)")
    with pytest.raises(InputShapeError, match=r"dynamic input 0 takes shapes at most "
                                              r"\[1, 16, 8\]; this call gives \[1, 4\]"):
        prog.run(torch.randn(1, 4), torch.arange(4))   # another rank
    assert torch.equal(prog.state()["k_cache"], before)


def test_tensorrt_rtx_ahead_of_time_with_input_specs(tmp_path):
    """On a machine without a GPU: compile and save with `torch_tensorrt.Input` min/opt/max
    specs (no CUDA query to make example tensors), every dynamic engine binding bounded."""
    torch_tensorrt = torch_tensorrt_or_skip()
    specs = prefill_input_specs(torch_tensorrt)
    trt = compile_rtx(_export(PrefillCache().eval()), specs)
    path = tmp_path / "rtx.pte"
    torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=specs)
    info = inspect_pte(path.read_bytes()).method("forward")
    assert {d.engine_kind for d in info.delegates} == {"tensorrt_rtx"}
    dynamic = [(d.index, b[0]) for d in info.delegates for b in d.bindings if -1 in b[2]]
    bounded = {(d.index, n): s for d in info.delegates for n, s in d.max_shapes}
    assert dynamic and set(dynamic) == set(bounded)
    assert set(bounded.values()) == {(1, MAX_T, 8)}
