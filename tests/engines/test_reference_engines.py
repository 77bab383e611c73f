"""CPU reference engines behind the patched `torch_tensorrt.compile` (`tte.reference.engines()`):
for every stateful test model, the same partitions and the same aliased I/O as the TensorRT-RTX
engines built for it; the compiled module runs in PyTorch like eager (buffers included); the
`.pte` `torch_tensorrt.save` writes runs in ExecuTorch with this project's runtime like eager,
moving 0 bytes of KV state and one buffer-sized copy per copy-back buffer per step."""
from __future__ import annotations

import copy

import pytest
import torch
from e2e_models import MODELS
from rtx_env import engine_modules, torch_tensorrt_or_skip
from upstream_matrix import compiled, nbytes, reference_compiled

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.executorch.running.program import load

pytestmark = pytest.mark.inspects_pte

STEPS = 8


def _engines(gm):
    """engine name -> (input bindings, output bindings, aliased {output: input})."""
    return {n: (tuple(m.input_binding_names), tuple(m.output_binding_names),
                {o: i for o, (i, _) in (m.aliased_io or {}).items()})
            for n, m in engine_modules(gm).items()}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_reference_engines_alias_like_tensorrt_rtx(name):
    _, reference = reference_compiled(name)
    _, _, _, rtx = compiled(name)
    ref, real = _engines(reference), _engines(rtx)
    assert sorted(ref) == sorted(real)
    for engine in real:
        assert ref[engine][0] == real[engine][0], engine          # same input bindings
        assert ref[engine][2] == real[engine][2], engine          # same aliased I/O
    assert reference.mutation_plan.kinds() == rtx.mutation_plan.kinds()


def _run(fn, eager, args_of, name):
    for step in range(STEPS):
        args = args_of(step)
        with torch.no_grad():
            want = eager(*copy.deepcopy(args))
            got = fn(*args)
        got = got[0] if isinstance(got, (list, tuple)) else got
        torch.testing.assert_close(got, want, msg=lambda m: f"{name} step {step}: {m}")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_pte_from_torch_tensorrt_save_runs_like_eager(tmp_path, name):
    torch_tensorrt = torch_tensorrt_or_skip()
    model, trt = reference_compiled(name)
    _, args_of, _ = MODELS[name]
    path = tmp_path / f"{name}.pte"
    torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=list(args_of(0)))
    prog = load(path)
    _run(prog.run, copy.deepcopy(model), args_of, name)
    traffic = prog.state_traffic()
    size = nbytes(model)
    assert traffic == {w.fqn: 0 if w.is_kv else size[w.fqn] for w in trt.mutation_plan}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_compiled_module_runs_like_eager_in_pytorch(name):
    model, compiled_once = reference_compiled(name)
    trt = copy.deepcopy(compiled_once)   # the cached module stays at its initial state
    eager = copy.deepcopy(model)
    _run(trt, eager, MODELS[name][1], name)
    for fqn in compiled_once.mutation_plan.fqns:   # copy-back buffers included
        torch.testing.assert_close(trt.get_buffer(fqn), eager.get_buffer(fqn))


@pytest.mark.parametrize("retrace,legacy", [(False, None), (True, True), (False, False)])
@pytest.mark.parametrize("name", ["two_submodules", "gated_deltanet_states"])
def test_every_exporter_writes_a_pte_that_runs(tmp_path, name, retrace, legacy):
    torch_tensorrt = torch_tensorrt_or_skip()
    model, trt = reference_compiled(name)
    _, args_of, _ = MODELS[name]
    path = tmp_path / "m.pte"
    torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=list(args_of(0)),
                        retrace=retrace, use_legacy_exporter=legacy)
    _run(load(path).run, copy.deepcopy(model), args_of, name)


def test_a_predicted_kv_write_the_engine_did_not_alias_falls_back_to_copy_back(tmp_path,
                                                                                monkeypatch):
    """The engine refuses the alias the plan predicted (as a converter may): compile does not
    abort, the write is copied back, every call still updates the cache like eager."""
    torch_tensorrt = torch_tensorrt_or_skip()
    from torch_tensorrt_ext.engines import reference_engine as seam_engines
    monkeypatch.setattr(seam_engines, "aliased_in_partition", lambda *a: False)
    factory, args_of, _ = MODELS["kv_index_copy"]
    model = factory().eval()
    with tte.reference.engines():
        trt = torch_tensorrt.compile(torch.export.export(copy.deepcopy(model), args_of(0)),
                                     ir="dynamo", arg_inputs=list(args_of(0)), min_block_size=1)
    w = trt.mutation_plan["k"]
    assert w.kind.name == "COPY_BACK"
    assert "did not alias it; copied back instead" in w.reason
    path = tmp_path / "m.pte"
    torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=list(args_of(0)))
    prog = load(path)
    _run(prog.run, copy.deepcopy(model), args_of, "kv_index_copy")
    assert prog.state_traffic() == {"k": nbytes(model)["k"]}
    _run(trt, copy.deepcopy(model), args_of, "kv_index_copy")


class _PermutedIntoAnEngine(torch.nn.Module):
    """A `permute` left to PyTorch hands the engine after it a strided view."""

    def forward(self, x, w):
        z = x.permute(0, 2, 1)
        return torch.relu(z * 2.0 + w) / (w + 3.0) - z.sin() * z.cos()


def test_an_engine_fed_a_strided_view_by_pytorch_runs_like_eager():
    """The payload is lowered for dense inputs, the layout the engine is handed (as TensorRT
    bindings are); lowered for the view's strides, ExecuTorch's `div` refused the call (mixed
    dim orders, error 0x12)."""
    torch_tensorrt = torch_tensorrt_or_skip()
    model = _PermutedIntoAnEngine()
    x, w = torch.randn(2, 3, 4), torch.randn(2, 4, 3)
    ep = torch.export.export(model, (x, w))
    with tte.reference.engines():
        trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=[x, w], min_block_size=1,
                                     torch_executed_ops={"torch.ops.aten.permute.default"})
    fed = [n for n in trt.graph.nodes if n.op == "call_module" and "_run_on_acc" in n.target]
    assert [a.target for a in fed[0].args if a.op == "call_module"] == ["_run_on_gpu_0"]
    torch.testing.assert_close(trt(x, w), model(x, w))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_compile_keeps_one_engine_record_per_engine_with_every_field(name):
    """`trt_gm.engine_infos` (what `tte.reference.compile`'s `.engines` reads): each engine's kind
    is its own, and its copy-back pairs are exactly the plan's engine-copied writes."""
    _, reference = reference_compiled(name)
    _, _, _, rtx = compiled(name)
    for gm, kind in ((reference, "reference"), (rtx, "tensorrt")):
        infos = {i.name: i for i in gm.engine_infos}
        assert sorted(infos) == sorted(engine_modules(gm)), name
        assert {i.kind for i in infos.values()} == {kind}
        plan = {(w.engine, w.output_binding, w.input_binding)
                for w in gm.mutation_plan if w.engine_copies}
        assert {(i.name, o, b) for i in infos.values() for o, b in i.copy_back} == plan
        assert {(i.name, a.output, a.input) for i in infos.values() for a in i.aliased_io} == \
            {(w.engine, w.output_binding, w.input_binding) for w in gm.mutation_plan if w.is_kv}
