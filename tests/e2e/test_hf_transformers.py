"""Hugging Face transformers decoders, used exactly as transformers documents ExecuTorch export
(`transformers.integrations.executorch`), through the public API: `tte.reference.export(...)` then
`tte.executorch.load(path).run(...)`. Tiny random configs, nothing downloaded.

Each model: prefill (4 tokens) then 8 decode steps equal eager logits at every step, and every KV
cache of the decode method moves 0 bytes per step (aliased); the only copied-back state is the
caches' int64 `cumulative_length` counters (8 bytes each).
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers")
from hf_models import MAX_CACHE, MODELS, _eager, _model, _tokens  # noqa: E402
from transformers.integrations.executorch import (  # noqa: E402
    TorchExportableModuleForDecoderOnlyLM,
    TorchExportableModuleWithStaticCache,
)

import torch_tensorrt_ext as tte  # noqa: E402

pytestmark = pytest.mark.inspects_pte

PROMPT = 4
STEPS = 8


def _cache_fqns(plan):
    return sorted(f for f in plan.fqns if "cumulative_length" not in f)


def _check_decode(prog, eager, start, run, name):
    for step in range(STEPS):
        ids, pos = _tokens(start + step), torch.tensor([start + step])
        with torch.no_grad():
            want = eager(input_ids=ids, cache_position=pos)
        got = run(ids, pos)
        torch.testing.assert_close(got[0], want, msg=lambda m: f"{name} decode {step}: {m}")


def _check_traffic(prog, plan):
    traffic = prog.state_traffic()
    caches = _cache_fqns(plan)
    assert caches and {f: traffic[f] for f in caches} == {f: 0 for f in caches}
    counters = sorted(f for f in plan.fqns if "cumulative_length" in f)
    assert {f: traffic[f] for f in counters} == {f: 8 for f in counters}
    assert set(traffic) == set(plan.fqns)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_prefill_and_decode_match_eager_with_caches_aliased(tmp_path, name):
    """`TorchExportableModuleForDecoderOnlyLM.export()` (strict, as documented) for prefill and
    decode; one .pte with two methods sharing the caches."""
    model = _model(name)
    exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=MAX_CACHE)
    prefill = exportable.export(input_ids=_tokens(0, PROMPT), cache_position=torch.arange(PROMPT))
    decode = exportable.export(input_ids=_tokens(0), cache_position=torch.tensor([0]))
    plan = tte.plan_mutations(decode)
    assert all(plan[f].is_kv for f in _cache_fqns(plan)), str(plan)
    path = tte.reference.export({"prefill": (prefill, None), "decode": (decode, None)},
                                str(tmp_path / f"{name}.pte"), share_mutable_buffers=True)
    prog = tte.executorch.load(path, method="decode")
    eager = _eager(model)
    ids, pos = _tokens(0, PROMPT), torch.arange(PROMPT)
    with torch.no_grad():
        want = eager(input_ids=ids, cache_position=pos)
    torch.testing.assert_close(prog.run(ids, pos, method="prefill")[0], want)
    _check_decode(prog, eager, PROMPT, prog.run, name)
    _check_traffic(prog, plan)


def _decode_only(tmp_path, model_or_ep, args, run_args, name, model_name="llama", **kw):
    model = _model(model_name)
    path = tte.reference.export(model_or_ep(model), args, str(tmp_path / f"{name}.pte"), **kw)
    prog = tte.executorch.load(path)
    _check_decode(prog, _eager(model), 0, lambda i, p: prog.run(*run_args(i, p)), name)
    return prog


def test_static_cache_module_non_strict_plans_lifted_caches_as_buffers(tmp_path):
    """`TorchExportableModuleWithStaticCache` handed in as a module: non-strict export lifts the
    caches (held on `static_cache.layers[i]`) as constants; they are planned as the buffers they
    share memory with, the reason says so, and the .pte matches eager."""
    model = _model("llama")
    wrapper = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=MAX_CACHE)
    args = (_tokens(0), None, torch.tensor([0]))
    ep = torch.export.export(wrapper, args, strict=False)
    plan = tte.plan_mutations(ep)
    assert plan.fqns == ("key_cache_0", "value_cache_0", "cumulative_length_0")
    assert [w.is_kv for w in plan] == [True, True, False]
    for w in plan:
        assert w.reason.startswith("module state lifted by torch.export as constant "), w.reason
        assert f"planned as buffer {w.fqn!r}" in w.reason
    prog = _decode_only(tmp_path, lambda m: TorchExportableModuleWithStaticCache(
        m, batch_size=1, max_cache_len=MAX_CACHE), args, lambda i, p: (i, None, p), "nonstrict")
    _check_traffic(prog, plan)


@pytest.mark.parametrize("name,strict", [("llama", False), ("llama", True), ("gemma3", False)])
def test_decoder_only_lm_exported_program_any_mode(tmp_path, name, strict):
    """The ExportedProgram `.export(strict=...)` returns goes in as it is (Gemma3: the hybrid
    cache's layers, lifted as constants by non-strict export, merge into their buffers)."""
    def ep(model):
        exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1,
                                                            max_cache_len=MAX_CACHE)
        return exportable.export(input_ids=_tokens(0), cache_position=torch.tensor([0]),
                                 strict=strict)
    prog = _decode_only(tmp_path, ep, None, lambda i, p: (i, p), f"ep_{name}_{strict}", name)
    layers = 2 if name == "gemma3" else 1
    assert prog.state_traffic() == {
        **{f"{kind}_{i}": 0 for i in range(layers) for kind in ("key_cache", "value_cache")},
        **{f"cumulative_length_{i}": 8 for i in range(layers)}}


def test_static_cache_module_strict_export(tmp_path):
    prog = _decode_only(
        tmp_path, lambda m: TorchExportableModuleWithStaticCache(m, batch_size=1,
                                                                 max_cache_len=MAX_CACHE),
        (_tokens(0), None, torch.tensor([0])), lambda i, p: (i, None, p), "strict", strict=True)
    assert prog.state_traffic() == {"key_cache_0": 0, "value_cache_0": 0,
                                    "cumulative_length_0": 8}
