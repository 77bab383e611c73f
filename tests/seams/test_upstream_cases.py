"""The patched upstream API beyond the single-method matrix: writes left to PyTorch by
`torch_executed_ops`, several methods sharing a cache, ahead-of-time engines run without a
device, and inputs it must refuse (real TensorRT-RTX conversion, no GPU)."""
from __future__ import annotations

import warnings

import pytest
import torch

from plan_models import Stateful
from rtx_env import compile_rtx, recorded_aliasing, torch_tensorrt_or_skip
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
from torch_tensorrt_ext.contracts.plan import PlanError
from upstream_matrix import check_pte

pytestmark = pytest.mark.inspects_pte


def _kv(m, x, p):
    m.k.index_copy_(2, p, x)
    return (m.k * 0.5).sum(dim=2)


def _prefill(m, x):
    m.k[:, :, 0:4, :] = x
    return m.k.sum(2)


KV_ARGS = (torch.randn(1, 2, 1, 4), torch.tensor([3]))


def test_a_write_left_to_pytorch_is_copied_back(tmp_path):
    torch_tensorrt = torch_tensorrt_or_skip()
    model = Stateful(_kv, k=(1, 2, 8, 4))
    trt = compile_rtx(model, KV_ARGS, torch_executed_ops={"torch.ops.aten.index_copy.default"})
    w = trt.mutation_plan["k"]
    assert (w.kind.name, recorded_aliasing(trt)) == ("COPY_BACK", {})
    assert "torch_executed_ops" in w.reason
    path = tmp_path / "m.pte"
    torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=list(KV_ARGS))
    b = inspect_pte(path.read_bytes()).method("forward").buffers
    assert [(x.fqn, x.kind, x.program_copy_bytes, x.program_link_bytes, x.initial_value)
            for x in b] == [("k", "copy_back", 2 * 8 * 4 * 4, 0, True)]


def test_several_methods_alias_one_cache_in_device_memory():
    """Prefill and decode engines (TensorRT-RTX) each alias the cache, and the `.pte` holds it
    once: one cuda:0 arena both methods plan it in (ExecuTorch 1.5.1 alone keeps a copy per
    method, and warned so before `shared_state`)."""
    torch_tensorrt = torch_tensorrt_or_skip()
    import torch_tensorrt.executorch  # noqa: F401, F811
    pre_args = (torch.randn(1, 2, 4, 4),)
    pre = compile_rtx(Stateful(_prefill, k=(1, 2, 8, 4)), pre_args)
    dec = compile_rtx(Stateful(_kv, k=(1, 2, 8, 4)), KV_ARGS)
    programs = {"prefill": torch_tensorrt.dynamo.export(pre, arg_inputs=list(pre_args)),
                "decode": torch_tensorrt.dynamo.export(dec, arg_inputs=list(KV_ARGS))}
    edge = torch_tensorrt.executorch.export(programs)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "buffers .* cannot share")
        data = edge.to_executorch().buffer
    for name, compiled in (("prefill", pre), ("decode", dec)):
        check_pte(data, compiled.mutation_plan, {"k": 256}, method=name)
    (arena,) = inspect_pte(data).shared
    assert (arena.device, arena.nbytes, arena.buffers) == ("cuda:0", 256, (("k", 0),))
    assert {m for m, _ in arena.methods} == {"prefill", "decode"}


def test_an_engine_built_ahead_of_time_refuses_to_run_without_a_device():
    torch_tensorrt_or_skip()
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: the engine runs")
    from torch_tensorrt_ext.seams.device import NoDeviceError
    trt = compile_rtx(Stateful(_kv, k=(1, 2, 8, 4)), KV_ARGS)
    with pytest.raises(NoDeviceError, match=r"TensorRT engine '_run_on_acc_0' was built ahead "
                                            r"of time and needs a CUDA device to run"):
        trt(*KV_ARGS)


def test_a_caller_owned_cache_written_in_place_is_refused_naming_it():
    torch_tensorrt_or_skip()

    class UserCache(torch.nn.Module):
        def forward(self, x, cache, p):
            cache.index_copy_(2, p, x)
            return cache.sum(2)

    args = (torch.randn(1, 2, 1, 4), torch.zeros(1, 2, 8, 4), torch.tensor([1]))
    with pytest.raises(PlanError, match=r"user input 'cache' is written in place .* Keep the "
                                        r"state in a registered buffer"):
        compile_rtx(UserCache(), args)


def _pte_output_sizes(data: bytes, method: str = "forward"):
    from executorch.exir._serialize._program import deserialize_pte_binary
    plan = next(p for p in deserialize_pte_binary(data).program.execution_plan
                if p.name == method)
    return [list(plan.values[i].val.sizes) for i in plan.outputs]


@pytest.mark.parametrize("reduce", [lambda k: k.sum(), lambda k: k.sum(dim=(2, 3))],
                         ids=["0-dim", "leading-1"])
def test_a_lone_user_output_beside_a_kv_write_keeps_its_shape(tmp_path, reduce):
    """The engine's partition returns the KV write's new value beside the user's output; the
    engine module drops the aliased output and returns the lone user output bare, so the graph
    must not index it: a 0-dim result failed the save ("invalid index of a 0-dim tensor"), a
    `[1, 2]` one was silently saved as `[2]`."""
    torch_tensorrt = torch_tensorrt_or_skip()

    def kv_then_reduce(m, x, p):
        m.k.index_copy_(2, p, x)
        return reduce(m.k)

    model = Stateful(kv_then_reduce, k=(1, 2, 8, 4))
    want = list(model(*KV_ARGS).shape)
    trt = compile_rtx(Stateful(kv_then_reduce, k=(1, 2, 8, 4)), KV_ARGS)
    assert recorded_aliasing(trt) == {"k": ("_run_on_acc_0", "output1", "b_k")}
    path = tmp_path / "m.pte"
    torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=list(KV_ARGS))
    assert _pte_output_sizes(path.read_bytes()) == [want]
    check_pte(path.read_bytes(), trt.mutation_plan, {"k": 256})
    # upstream's legacy exporter inlines the engine call into the graph it serializes
    ep_path = tmp_path / "m.pt2"
    torch_tensorrt.save(trt, str(ep_path), output_format="exported_program", retrace=False)
    out = torch.export.load(str(ep_path)).graph.output_node().args[0]
    assert [list(o.meta["val"].shape) for o in out if "val" in o.meta][-1:] == [want]


def test_a_module_lifted_by_upstreams_helpers_is_refused_at_save_naming_the_write(tmp_path):
    """torch-tensorrt's own lifting helpers record a copy-back write only as a trailing output
    plus `gm.meta['_copyback_mutation_buffers']`; the series declares writes from the compiled
    module's plan, so saving such a module would drop the write silently — it is refused
    instead (upstream's test_saved_copyback_program_reloads_and_keeps_its_user_output)."""
    torch_tensorrt = torch_tensorrt_or_skip()
    from torch_tensorrt.dynamo.lowering._buffer_lifting import (inline_lifted_buffers_into_gm,
                                                                lift_mutated_buffers)

    class CopyBack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("state", torch.zeros(4))

        def forward(self, x):
            self.state.copy_(self.state + x.sum())
            return x * 3.0

    gm, lifted = lift_mutated_buffers(torch.export.export(CopyBack(), (torch.ones(8),)).module())
    gm = inline_lifted_buffers_into_gm(gm, lifted)
    path = tmp_path / "out.pt2"
    with pytest.raises(PlanError) as e:
        torch_tensorrt.save(gm, str(path), output_format="exported_program", retrace=True,
                            arg_inputs=(torch.ones(8),))
    assert str(e.value).startswith(
        "buffer 'state' is written (torch-tensorrt's lifting helpers recorded it in "
        "gm.meta['_copyback_mutation_buffers'] as a trailing graph output), but the module was "
        "not compiled by the patched torch_tensorrt.compile")
    assert not path.exists()
