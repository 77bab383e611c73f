"""ExecuTorch's own export API (`executorch.export.export` with
`ExportRecipe.get_recipe(TensorRTRecipeType.X)`) exports stateful models through TensorRT: a
decoder (KV caches, a conv ring buffer, a step counter) in each precision and a prefill + decode
pair sharing one cache (a dict of models and inputs, the prefill's length dynamic) — each `.pte`
stepped against eager, KV caches moving 0 bytes and copy-back state its own size per call; the
TensorRT-RTX recipe saves ahead of time here; a precision the engine kind cannot build is refused
naming both. And transformers decoders, whose RMSNorm and rotary embedding cast with
`.float()`, through the FP16 / BF16 recipes, each step as near the fp32 model as eager's.
"""
from __future__ import annotations

import copy

import pytest
import torch
from dynamic_models import PrefillCache, prefill_args, prefill_dims
from helpers import buffer_nbytes
from rtx_env import built_engine_kind, torch_tensorrt_or_skip

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.demo.models import Decoder
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte

pytestmark = pytest.mark.inspects_pte

recipes = pytest.importorskip("torch_tensorrt_ext.recipes")
export_api = pytest.importorskip("executorch.export")
R = recipes.TensorRTRecipeType
DTYPES = {R.FP32: torch.float32, R.FP16: torch.float16, R.BF16: torch.bfloat16}
TOLERANCE = {R.FP32: {}, R.FP16: dict(atol=1e-2, rtol=1e-2), R.BF16: dict(atol=6e-2, rtol=6e-2)}


def _export(model, inputs, recipe, path, **kw):
    """`executorch.export.export` with the TensorRT recipe, written to `path`."""
    session = export_api.export(model, inputs, export_recipe=export_api.ExportRecipe.get_recipe(
        recipe), **kw)
    path.write_bytes(session.get_pte_buffer())
    return tte.executorch.load(path)


def _per_call(path, method: str, eager) -> dict[str, int]:
    """The bytes each buffer must move per call of `method`, from what the file says it is: a KV
    cache the engine aliases 0, copy-back state its own size."""
    buffers = inspect_pte(path.read_bytes()).method(method).buffers
    return {b.fqn: 0 if b.kind == "kv_alias" else buffer_nbytes(eager, b.fqn) for b in buffers}


def _decoder_args(step: int, dtype: torch.dtype):
    x = torch.randn(1, 1, 16, generator=torch.Generator().manual_seed(step))
    return x.to(dtype), torch.tensor([step])


def test_the_provider_is_registered_with_executorchs_registry():
    registry = export_api.recipe_registry
    assert "tensorrt" in registry.list_backends()
    assert list(registry.get_supported_recipes("tensorrt")) == [R.FP32, R.FP16, R.BF16]


@pytest.mark.parametrize("recipe", list(R), ids=lambda r: r.value)
def test_a_stateful_decoder_through_executorchs_export_steps_like_eager(tmp_path, recipe):
    torch_tensorrt_or_skip()
    torch.manual_seed(0)
    model, dtype = Decoder(layers=2).eval(), DTYPES[recipe]
    eager = copy.deepcopy(model).to(dtype)
    with tte.reference.engines():
        prog = _export(model, [_decoder_args(0, torch.float32)], recipe, tmp_path / "d.pte")
    for step in range(6):
        args = _decoder_args(step, dtype)
        with torch.no_grad():
            want = eager(*args)
        got = prog.run(*args)[0]
        assert got.dtype == dtype
        torch.testing.assert_close(got, want, **TOLERANCE[recipe],
                                   msg=lambda m: f"step {step}: {m}")
    assert prog.state_traffic() == _per_call(tmp_path / "d.pte", "forward", eager)
    kinds = [b.kind for b in inspect_pte((tmp_path / "d.pte").read_bytes())
             .method("forward").buffers]
    assert sorted(kinds) == ["copy_back"] * 3 + ["kv_alias"] * 4


@pytest.mark.parametrize("recipe", [R.FP32, R.FP16], ids=lambda r: r.value)
def test_prefill_and_decode_as_two_methods_share_the_cache_like_eager(tmp_path, recipe):
    torch_tensorrt_or_skip()
    torch.manual_seed(0)
    model, dtype = PrefillCache().eval(), DTYPES[recipe]
    eager = copy.deepcopy(model).to(dtype)
    with tte.reference.engines():
        prog = _export({"prefill": model, "decode": model},
                       {"prefill": [prefill_args(4)], "decode": [prefill_args(1, 4)]},
                       recipe, tmp_path / "two.pte", dynamic_shapes={"prefill": prefill_dims()})
    assert prog.method_names == {"prefill", "decode"}
    for length, start in ((5, 0), (3, 5)):   # two prompts of other lengths, each then decoded
        steps = [("prefill", length, start)] + [
            ("decode", 1, at) for at in range(start + length, start + length + 2)]
        for method, n, at in steps:
            x, pos = prefill_args(n, at, generator=torch.Generator().manual_seed(at))
            with torch.no_grad():
                want = eager(x.to(dtype), pos)
            torch.testing.assert_close(prog.run(x.to(dtype), pos, method=method)[0], want,
                                       **TOLERANCE[recipe], msg=lambda m: f"{method} {at}: {m}")
            torch.testing.assert_close(prog.state()["k_cache"], eager.k_cache,
                                       **TOLERANCE[recipe])
    for method in ("prefill", "decode"):
        assert prog.state_traffic(method) == _per_call(tmp_path / "two.pte", method, eager)


@pytest.mark.parametrize("recipe", [R.FP16, R.BF16], ids=lambda r: r.value)
@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_a_transformers_decoder_casting_to_float32_steps_as_near_fp32_as_eager(tmp_path, name,
                                                                              recipe):
    """Found here: refused, "Tensor dtype mismatch! Expected: torch.float32, Got: torch.float16" —
    the recipe cast torch.export's program of the fp32 model and re-exported it, where each
    `.float()` had been traced as a no-op with a float32 assertion. The module is cast instead,
    as eager casts it: a prompt, then single tokens, through one method of dynamic length, each
    call's logits as near the fp32 model's as the eager cast model's; the caller's model stays
    fp32."""
    torch_tensorrt_or_skip()
    from hf_models import Stepped, _as_near_fp32_as_eager, _model, _tokens
    model, dtype = Stepped(_model(name)), DTYPES[recipe]
    exact, eager = copy.deepcopy(model), copy.deepcopy(model).to(dtype)
    t = torch.export.Dim("T", min=1, max=8)
    with tte.reference.engines():
        prog = _export(model, [(_tokens(0, 4), torch.arange(4))], recipe, tmp_path / "lm.pte",
                       dynamic_shapes=({1: t}, {0: t}))
    assert model.lm.key_cache_0.dtype == torch.float32
    at = 0
    for n in (4, 1, 1, 1, 1):
        ids, pos = _tokens(at, n), torch.arange(at, at + n)
        with torch.no_grad():
            got = prog.run(ids, pos)[0]
            assert got.dtype == dtype and tuple(got.shape) == (1, n, 64)
            _as_near_fp32_as_eager(got, eager(ids, pos), exact(ids, pos), f"{name} at {at}")
        at += n


def test_the_tensorrt_rtx_recipe_saves_ahead_of_time(tmp_path):
    torch_tensorrt_or_skip()
    if built_engine_kind() != "tensorrt_rtx":
        pytest.skip("torch-tensorrt (not -rtx) builds engines on a GPU runner")
    torch.manual_seed(0)
    session = export_api.export(Decoder(layers=2).eval(), [_decoder_args(0, torch.float32)],
                                export_recipe=export_api.ExportRecipe.get_recipe(R.FP16))
    (tmp_path / "rtx.pte").write_bytes(session.get_pte_buffer())
    info = inspect_pte((tmp_path / "rtx.pte").read_bytes()).method("forward")
    assert {(d.backend, d.magic, d.engine_kind) for d in info.delegates} == {
        ("TensorRTBackend", "TR03", "tensorrt_rtx")}
    assert sorted(b.kind for b in info.buffers) == ["copy_back"] * 3 + ["kv_alias"] * 4


def test_a_precision_the_engines_cannot_build_is_refused_naming_recipe_and_engines(monkeypatch):
    torch_tensorrt_or_skip()
    if torch.cuda.is_available():
        pytest.skip("the target is the device's own")
    monkeypatch.setenv("TTE_TARGET_COMPUTE_CAPABILITY", "7.5")
    with pytest.raises(recipes.UnsupportedRecipe) as e:
        export_api.ExportRecipe.get_recipe(R.BF16)
    assert str(e.value) == (
        f"recipe 'tensorrt_bf16' needs torch.bfloat16 engines, which '{built_engine_kind()}' "
        "engines for compute capability 7.5 do not build; they take ['tensorrt_fp32', "
        "'tensorrt_fp16']")
    with tte.reference.engines():   # CPU reference engines build every precision
        assert export_api.ExportRecipe.get_recipe(R.BF16).name == "tensorrt_bf16"
