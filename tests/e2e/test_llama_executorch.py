"""ExecuTorch's own llama caches (`executorch.examples.models.llama.attention`: `KVCache`,
`RingKVCache`) through the public API, as their users write them:

* dynamic shape: `input_pos[0].item()` then `index_copy_` — the SymInt never crosses an engine
  boundary (kept in PyTorch), also with `torch_executed_ops=("aten.item.default",)`;
* static (the default): `k_cache[:, :, input_pos] = k_val` — an `index_put`, rewritten to the KV
  form, so it aliases.

Every step equals eager; KV caches move 0 bytes per step, other state exactly its own size.
"""
from __future__ import annotations

import copy

import pytest
import torch
from helpers import buffer_nbytes
from llama_layers import DIM, HEADS, _args, _kv, _ring
from model_families import custom_ops_llama as _custom_ops_llama

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.executorch.saving import lower

pytestmark = pytest.mark.inspects_pte


STEPS = 8


def _run(tmp_path, model, name, **kw):
    eager = copy.deepcopy(model)
    ep, compiled = tte.reference.export_program(model, _args(0), **kw)
    path = lower.save_pte(ep, str(tmp_path / f"{name}.pte"))
    prog = tte.executorch.load(path)
    for step in range(STEPS):
        args = _args(step)
        with torch.no_grad():
            want = eager(*copy.deepcopy(args))
        torch.testing.assert_close(prog.run(*args)[0], want,
                                   msg=lambda m: f"{name} step {step}: {m}")
    return eager, compiled.plan, prog.state_traffic()


CASES = {
    # name: (factory, {fqn: kind}, export kwargs)
    "kv_dynamic_item": (lambda: _kv(True), {"kv.k_cache": "KV_ALIAS", "kv.v_cache": "KV_ALIAS"},
                        {}),
    "kv_dynamic_item_in_torch": (lambda: _kv(True), {"kv.k_cache": "KV_ALIAS",
                                                     "kv.v_cache": "KV_ALIAS"},
                                 {"torch_executed_ops": ("aten.item.default",)}),
    "kv_static_index_put": (lambda: _kv(False), {"kv.k_cache": "KV_ALIAS",
                                                 "kv.v_cache": "KV_ALIAS"}, {}),
    "ring_dynamic_item": (lambda: _ring(True), {
        "kv.k_cache": "KV_ALIAS", "kv.v_cache": "KV_ALIAS",
        "kv.cache_positions_manager.cache_positions": "COPY_BACK"}, {}),
    "ring_dynamic_item_in_torch": (lambda: _ring(True), {
        "kv.k_cache": "KV_ALIAS", "kv.v_cache": "KV_ALIAS",
        "kv.cache_positions_manager.cache_positions": "COPY_BACK"},
        {"torch_executed_ops": ("aten.item.default",)}),
    "ring_static_index_put": (lambda: _ring(False), {
        "kv.k_cache": "KV_ALIAS", "kv.v_cache": "KV_ALIAS",
        "kv.cache_positions_manager.cache_positions": "COPY_BACK"}, {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_llama_cache_matches_eager_and_kv_moves_no_bytes(tmp_path, name):
    factory, kinds, kw = CASES[name]
    eager, plan, traffic = _run(tmp_path, factory().eval(), name, **kw)
    assert {w.fqn: w.kind.name for w in plan} == kinds, str(plan)
    assert traffic == {f: 0 if k == "KV_ALIAS" else buffer_nbytes(eager, f)
                       for f, k in kinds.items()}


def test_index_put_kv_reason_names_the_rewrite():
    plan = tte.plan_mutations(torch.export.export(_kv(False).eval(), _args(0)))
    assert plan["kv.k_cache"].op == "aten.index_put.default"
    assert plan["kv.k_cache"].reason == ("index_put of one position rewritten to index_copy "
                                         "along dim 2 of [1,2,8,4] -> IKVCacheUpdateLayer")


def test_item_runs_outside_engines_and_every_engine_binding_is_a_tensor():
    """The `.item()` runs in the program (PyTorch / ExecuTorch), never as an engine binding: a
    symbolic scalar reaches an engine only as a tensor."""
    from torch_tensorrt_ext.engines.execute_op import OP as EXECUTE_ENGINE
    ep, _ = tte.reference.export_program(_kv(True).eval(), _args(0))
    nodes = [n for n in ep.graph.nodes if n.op == "call_function"]
    scalar_ops = (torch.ops.aten.item.default, torch.ops.aten._local_scalar_dense.default)
    assert [n for n in nodes if n.target in scalar_ops]
    calls = [n for n in nodes if n.target is EXECUTE_ENGINE]
    assert calls
    for call in calls:
        for arg in call.args[0]:
            assert isinstance(arg.meta["val"], torch.Tensor), (call.name, arg.name)


@pytest.mark.parametrize("strict", [False, True])
def test_compile_takes_a_module_in_either_export_mode(strict):
    """`tte.reference.compile(module, args, strict=...)`: called from PyTorch, the caches after
    every step equal eager's."""
    model = _kv(False).eval()
    eager = copy.deepcopy(model)
    compiled = tte.reference.compile(model, _args(0), strict=strict)
    assert [(w.fqn, w.kind.name) for w in compiled.plan] == [("kv.k_cache", "KV_ALIAS"),
                                                              ("kv.v_cache", "KV_ALIAS")]
    for step in range(STEPS):
        with torch.no_grad():
            torch.testing.assert_close(compiled(*_args(step)), eager(*_args(step)))
        for fqn in ("kv.k_cache", "kv.v_cache"):
            torch.testing.assert_close(compiled.gm.get_buffer(fqn), eager.get_buffer(fqn))


class _Holder:
    """A cache on a plain Python object, never registered (non-strict export lifts it as a
    constant)."""

    def __init__(self):
        self.k = torch.zeros(1, HEADS, 8, DIM)


class UnregisteredCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(DIM, DIM)
        self.holder = _Holder()

    def forward(self, x, input_pos):
        self.holder.k.index_copy_(2, input_pos, self.proj(x))
        return self.holder.k.sum(2)


def test_unregistered_cache_becomes_a_buffer_of_the_program(tmp_path):
    """Planned under its constant FQN, carried by the .pte as a buffer: every step equals eager
    (before, the write was dropped and the program read a frozen constant)."""
    model = UnregisteredCache().eval()
    plan = tte.plan_mutations(torch.export.export(copy.deepcopy(model), _args(0), strict=False))
    assert [(w.fqn, w.kind.name) for w in plan] == [("lifted_tensor_0", "KV_ALIAS")]
    assert plan["lifted_tensor_0"].reason.startswith(
        "module state lifted by torch.export as constant 'lifted_tensor_0' (a tensor held "
        "outside any registered buffer), planned as buffer 'lifted_tensor_0'; index_copy")
    eager = copy.deepcopy(model)
    prog = tte.executorch.load(tte.reference.export(model, _args(0), str(tmp_path / "u.pte")))
    for step in range(STEPS):
        with torch.no_grad():
            want = eager(*_args(step))
        torch.testing.assert_close(prog.run(*_args(step))[0], want)
    assert prog.state_traffic() == {"lifted_tensor_0": 0}


def test_llama_update_cache_custom_op_is_named_in_the_reason():
    """ExecuTorch's `llama::update_cache` (a torch.library op with a mutating schema): the plan
    names the custom op, not the `getitem` of its functionalized form."""
    pytest.importorskip("executorch.extension.llm.custom_ops.custom_ops")

    class UpdateCache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("k_cache", torch.zeros(1, 8, HEADS, DIM))

        def forward(self, x, input_pos):
            torch.ops.llama.update_cache(x, self.k_cache, input_pos.item())
            return self.k_cache.sum(1)

    plan = tte.plan_mutations(torch.export.export(UpdateCache(), (torch.ones(1, 1, HEADS, DIM),
                                                                  torch.tensor([3]))))
    w = plan["k_cache"]
    assert (w.kind.name, w.op) == ("COPY_BACK", "llama.update_cache.default")
    assert w.reason == ("written in place by custom op llama.update_cache.default (a torch.library "
                        "op whose schema mutates the buffer); it has no IKVCacheUpdateLayer "
                        "converter, so the new value is copied back")


# --- the dynamic llama with ExecuTorch's custom KV cache and SDPA -------------------------------

def _llama_calls(prompt: int, decodes: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    yield torch.randint(0, 128, (1, prompt), generator=g), torch.tensor([0])
    for at in range(prompt, prompt + decodes):
        yield torch.randint(0, 128, (1, 1), generator=g), torch.tensor([at])


def _steps_like_eager(prog, model):
    """Prompts of 5 and 3 (after `reset()`), each followed by 3 decodes: every output and every
    buffer by FQN equal to eager's after every call."""
    for prompt, seed in ((5, 0), (3, 1)):
        prog.reset()
        eager = copy.deepcopy(model)
        for k, (tokens, pos) in enumerate(_llama_calls(prompt, 3, seed)):
            with torch.no_grad():
                want = eager(tokens, pos)
            got = prog.run(tokens, pos)[0]
            torch.testing.assert_close(got, want, msg=lambda m: f"prompt {prompt} call {k}: {m}")
            for fqn, value in prog.state().items():
                torch.testing.assert_close(value, eager.get_buffer(fqn),
                                           msg=lambda m: f"{fqn} after call {k}: {m}")


def test_dynamic_llama_with_its_custom_kv_cache_steps_like_eager(tmp_path):
    """One dynamic method (T up to 8), as ExecuTorch's export makes it: saved (it was refused by
    the write check: "written by kernel llama::update_cache.out with 1024 bytes; the write must
    cover the whole buffer" — an in-place write of T positions is a write of part of the buffer,
    not a dropped one), and the `.pte` steps like eager, as stock ExecuTorch runs it."""
    model = _custom_ops_llama()
    t = torch.export.Dim("T", max=8)
    ep = torch.export.export(model, (torch.randint(0, 128, (1, 4)), torch.tensor([0])),
                             dynamic_shapes=({1: t}, {0: 1}), strict=True)
    prog = tte.executorch.load(tte.reference.export(ep, str(tmp_path / "llama.pte")))
    _steps_like_eager(prog, model)

