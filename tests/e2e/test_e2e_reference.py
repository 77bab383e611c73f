"""Stateful models through reference.export + executorch.load: every step equals eager, and the
state traffic is what the plan promises (KV: 0 bytes, copy-back: one buffer-sized copy)."""
from __future__ import annotations

import copy

import pytest
import torch
from e2e_models import MODELS, HeldByAnotherObject, x4
from helpers import buffer_nbytes

from torch_tensorrt_ext import reference
from torch_tensorrt_ext.demo.models import Decoder
from torch_tensorrt_ext.executorch.saving import lower
from torch_tensorrt_ext.executorch.running.program import load
from torch_tensorrt_ext.upstream_api import torch_tensorrt_module

pytestmark = [pytest.mark.inspects_pte, pytest.mark.emulated_device]

STEPS = 8


def _run_pte(tmp_path, name, model, args_of, **kw):
    eager = copy.deepcopy(model)
    ep, compiled = reference.export_program(model, args_of(0), **kw)
    path = lower.save_pte(ep, str(tmp_path / f"{name}.pte"))
    prog = load(path)
    for step in range(STEPS):
        args = args_of(step)
        with torch.no_grad():
            want = eager(*copy.deepcopy(args))
        got = prog.run(*args)
        torch.testing.assert_close(got[0], want, msg=lambda m: f"{name} step {step}: {m}")
    return eager, compiled, prog


@pytest.mark.parametrize("name", sorted(MODELS))
def test_pte_matches_eager_every_step(tmp_path, name):
    factory, args_of, kinds = MODELS[name]
    eager, compiled, prog = _run_pte(tmp_path, name, factory().eval(), args_of)
    assert {w.fqn: w.kind.name for w in compiled.plan} == {
        f: k or compiled.plan[f].kind.name for f, k in kinds.items()}
    traffic = prog.state_traffic()
    kinds = {w.fqn: w.kind.name for w in compiled.plan}
    for fqn, kind in kinds.items():
        want = 0 if kind == "KV_ALIAS" else buffer_nbytes(eager, fqn)
        assert traffic[fqn] == want, (fqn, kind, traffic)


def test_state_written_through_another_object_starts_from_the_modules_values(tmp_path):
    """reference.export traces a copy of the module non-strict; the writes it runs on the copy's
    real buffers (held by another object, as transformers' cache layers hold theirs) are undone,
    so the program starts from the module's state, not the traced one (length 1 after the trace)."""
    model = HeldByAnotherObject().eval()
    eager, _, prog = _run_pte(tmp_path, "held", model,
                              lambda s: (x4(s, 1, 2, 1, 4), torch.tensor([s % 8])))
    assert float(eager.length) == STEPS and float(model.length) == 0
    torch.testing.assert_close(prog.state()["length"], eager.length)
    torch.testing.assert_close(prog.state()["k"], eager.k)
    prog.reset()
    assert float(prog.state()["length"]) == 0 and not prog.state()["k"].any()


def test_decoder_pte_matches_eager_and_moves_no_kv_bytes(tmp_path):
    model = Decoder(layers=3).eval()
    eager, compiled, prog = _run_pte(tmp_path, "decoder", model,
                                     lambda s: model.example_args(pos=s))
    traffic = prog.state_traffic()
    assert len(compiled.plan) == 10
    for w in compiled.plan:
        assert traffic[w.fqn] == (0 if w.is_kv else buffer_nbytes(eager, w.fqn)), w.fqn
    assert prog.program_copy_bytes() == {w.fqn: 0 for w in compiled.plan}  # no write-back copy_


@pytest.mark.parametrize("name", ["kv_index_copy", "ring_buffer", "two_submodules",
                                  "gated_deltanet_states", "ema_and_counter"])
def test_compiled_module_called_from_pytorch_updates_every_buffer(name):
    factory, args_of, kinds = MODELS[name]
    model = factory().eval()
    eager = copy.deepcopy(model)
    compiled = reference.compile(torch.export.export(copy.deepcopy(model), args_of(0)))
    for step in range(STEPS):
        args = args_of(step)
        with torch.no_grad():
            want = eager(*copy.deepcopy(args))
            got = compiled(*args)
        torch.testing.assert_close(got, want)
        for fqn in kinds:
            torch.testing.assert_close(compiled.gm.get_buffer(fqn), eager.get_buffer(fqn),
                                       msg=lambda m: f"{fqn} step {step}: {m}")


def test_torch_executed_write_is_copied_back_by_the_program(tmp_path):
    factory, args_of, _ = MODELS["kv_index_copy"]
    eager, compiled, prog = _run_pte(tmp_path, "excluded", factory().eval(), args_of,
                                     torch_executed_ops=["aten.index_copy.default"])
    w = compiled.plan["k"]
    assert w.kind.name == "COPY_BACK" and "torch_executed_ops" in w.reason
    # written outside any engine: ExecuTorch's own write-back copy_, exactly once per call
    assert prog.program_copy_bytes()["k"] == buffer_nbytes(eager, "k")
    assert prog.state_traffic()["k"] == buffer_nbytes(eager, "k")


def test_buffer_resized_in_forward_is_refused_naming_it():
    class Grows(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("hist", torch.zeros(2))

        def forward(self, x):
            self.hist = torch.cat([self.hist, x])
            return self.hist.sum()
    with pytest.raises(ValueError, match=r"buffer 'hist' changes from torch.float32 \[2\] to "
                                         r"torch.float32 \[3\] in forward"):
        reference.export_program(Grows(), (torch.ones(1),))


class _Reader(torch.nn.Module):
    """A second method that only reads the buffer (shares it with share_mutable_buffers)."""

    def __init__(self, template):
        super().__init__()
        for name, b in template.named_buffers():
            self.register_buffer(name, b.clone())

    def forward(self, x):
        return torch.cat([b.reshape(-1) for b in self.buffers()]) + x * 0


@pytest.mark.parametrize("name,kw", [("kv_write_only", {}),
                                     ("state_only_engine",
                                      {"torch_executed_ops": ["aten.mul.Tensor"]})])
def test_state_written_without_readers_is_really_written(tmp_path, name, kw):
    """Read the state back through a second method of the same program after each step."""
    from e2e_models import Stateful as S
    from e2e_models import _state_only, x4
    if name == "kv_write_only":
        factory, args_of, _ = MODELS[name]
    else:
        factory, args_of = (lambda: S(_state_only, n=(1,))), (lambda s: (x4(s, 3),))
    model = factory().eval()
    eager = copy.deepcopy(model)
    methods = {"forward": (model, args_of(0)), "read": (_Reader(model), (torch.zeros(1),))}
    programs = reference.export_methods(methods, **kw)
    prog = load(lower.save_pte(programs, str(tmp_path / f"{name}.pte"), share_mutable_buffers=True))
    for step in range(4):
        args = args_of(step)
        with torch.no_grad():
            eager(*copy.deepcopy(args))
        prog.run(*args)
        state = torch.cat([b.reshape(-1) for b in eager.buffers()])
        torch.testing.assert_close(prog.run(torch.zeros(1), method="read")[0], state)


def _edge(programs):
    """torch-tensorrt's (patched) edge manager for `programs`, state on the host (also in the
    emulated-device suite's run)."""
    import torch_tensorrt.executorch  # noqa: F401

    from torch_tensorrt_ext.executorch.saving.partition import reference_device
    with reference_device("cpu"):
        return torch_tensorrt_module().executorch.export(programs)


def test_sharing_state_across_methods_changes_no_config_but_its_own():
    """Host state shared by two methods (the planner's share_mutable_buffers, set for them)
    leaves every other save alone: neither the default ExecutorchBackendConfig's planner —
    one instance every default config shares — nor a config the caller passed is changed (a
    later save with device state once failed: "Cannot share mutable buffers if all other
    tensors are not on the default mem_id of 1")."""
    from executorch.exir import ExecutorchBackendConfig

    from torch_tensorrt_ext.executorch.saving.config import plan_state
    factory, args_of, _ = MODELS["kv_write_only"]
    model = factory().eval()
    methods = {"forward": (model, args_of(0)), "read": (_Reader(model), (torch.zeros(1),))}
    edge = _edge(reference.export_methods(methods))
    mine = ExecutorchBackendConfig()
    planner = mine.memory_planning_pass
    for given in (None, mine):
        config = plan_state(edge, given).config
        assert config.memory_planning_pass.share_mutable_buffers is True   # shared: host state
        assert config is not mine and config.memory_planning_pass is not planner
    assert ExecutorchBackendConfig().memory_planning_pass.share_mutable_buffers is False
    assert mine.memory_planning_pass is planner and planner.share_mutable_buffers is False
    default = ExecutorchBackendConfig().to_out_var_pass
    assert mine.passes == [] and type(mine.to_out_var_pass) is type(default)
    assert not any(k.startswith("_tte") for k in vars(config))   # the save's facts ride apart


def test_a_config_planned_for_state_is_not_planned_twice():
    """`plan_state` hands the save's facts beside the config it makes (nothing rides on the
    config); handed that config again it refuses, naming what to pass instead."""
    from torch_tensorrt_ext.errors import UsageError
    from torch_tensorrt_ext.executorch.saving.config import plan_state
    factory, args_of, _ = MODELS["kv_write_only"]
    edge = _edge(reference.export_methods({"forward": (factory().eval(), args_of(0))}))
    plan = plan_state(edge)
    assert set(plan.writes) == {"forward"} and plan.one_state is True
    assert plan_state(edge, share_across_methods=False).one_state is False
    with pytest.raises(UsageError, match="already planned for state by torch-tensorrt-ext; "
                       "pass to_executorch the config you started from"):
        edge.to_executorch(plan.config)
