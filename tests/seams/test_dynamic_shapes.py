"""Dynamic shapes: a prefill whose sequence length is known only at run time, through
`torch_tensorrt.compile` and `torch_tensorrt.save(output_format="executorch")` with reference
engines (run here, against eager, for several lengths, the state carried from call to call) and
with TensorRT-RTX engines built ahead of time (saved here; nothing here runs them)."""
from __future__ import annotations

import copy

import pytest
import torch
import torch._inductor
from dynamic_models import (FORMS, MAX_T, PrefillCache, ScatterPrefill, prefill_args,
                            prefill_dims, prefill_input_specs)
from rtx_env import compile_rtx, recorded_aliasing, torch_tensorrt_or_skip
from upstream_matrix import CELLS, declared, expected_declarations

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.executorch import load
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
from torch_tensorrt_ext.executorch.running.method_inputs import InputShapeError

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.emulated_device]
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


def test_a_program_saved_without_its_dynamic_dims_runs_at_its_example_shape(tmp_path):
    """`torch_tensorrt.save` without `dynamic_shapes` over a module compiled from a dynamic
    program: a static program (T = 4) over engines built for every length. It runs its own shape
    like eager, the state carried; another length is refused before anything runs."""
    torch.manual_seed(0)
    torch_tensorrt = torch_tensorrt_or_skip()
    model = PrefillCache().eval()
    eager, trt = copy.deepcopy(model), _compile_reference(model)
    path = tmp_path / "static.pte"
    with tte.reference.engines():
        torch_tensorrt.save(trt, str(path), output_format="executorch",
                            arg_inputs=list(prefill_args(4)))
    info = inspect_pte(path.read_bytes()).method("forward")
    assert any(-1 in b[2] for d in info.delegates for b in d.bindings)   # the engines: dynamic
    prog = load(path)
    for start in (0, 4, 8):
        x, pos = prefill_args(4, start)
        with torch.no_grad():
            want = eager(x, pos)
        torch.testing.assert_close(prog.run(x, pos)[0], want)
        torch.testing.assert_close(prog.state()["k_cache"], eager.k_cache)
    with pytest.raises(InputShapeError, match=r"input 0 takes shapes \[1,4,8\]; this call gives "
                                              r"\[1,3,8\] \(nothing ran"):
        prog.run(*prefill_args(3, 12))
    torch.testing.assert_close(prog.state()["k_cache"], eager.k_cache)


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
        "method 'forward': dynamic input 0 takes shapes at most [1,16,8]; this call gives "
        "[1,17,8] (nothing ran, the state is as it was)")
    with pytest.raises(InputShapeError, match=r"dynamic input 0 takes shapes at most "
                                              r"\[1,16,8\]; this call gives \[1,4\]"):
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


def test_input_specs_without_shared_dims_share_the_length_the_program_shares(tmp_path):
    """`Input` min/opt/max specs without `shared_dims=` on the ahead-of-time path
    (TensorRT-RTX): the compiled program sizes `x`'s axis 1 and `pos`'s axis 0 by one symbol, so
    save and `torch_tensorrt.dynamo.export` give them one Dim — they failed with torch.export's
    "Constraints violated" and "Unsupported input type" before. The saved program takes any
    shared length within the bounds and refuses two different ones, naming them."""
    torch_tensorrt = torch_tensorrt_or_skip()
    specs = [torch_tensorrt.Input(min_shape=(1, 1, 8), opt_shape=(1, 4, 8),
                                  max_shape=(1, MAX_T, 8), dtype=torch.float32),
             torch_tensorrt.Input(min_shape=(1,), opt_shape=(4,), max_shape=(MAX_T,),
                                  dtype=torch.int64)]
    trt = compile_rtx(_export(PrefillCache().eval()), specs)
    ep = torch_tensorrt.dynamo.export(trt, arg_inputs=specs)
    sizes = [n.meta["val"].shape for n in ep.graph.nodes if n.op == "placeholder"
             and n.name in ep.graph_signature.user_inputs]
    assert str(sizes[0][1]) == str(sizes[1][0])          # one symbol for both
    assert [(r.lower, r.upper) for r in ep.range_constraints.values()] == [(1, MAX_T)]
    path = tmp_path / "specs.pte"
    torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=specs)
    info = inspect_pte(path.read_bytes()).method("forward")
    assert {d.engine_kind for d in info.delegates} == {"tensorrt_rtx"}


# --- real clients: transformers decoders with a dynamic prompt length ---------------------------

def _hf_prefill(name, max_t=8):
    from hf_models import MAX_CACHE, _model, _tokens
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM
    ex = TorchExportableModuleForDecoderOnlyLM(_model(name), batch_size=1,
                                               max_cache_len=MAX_CACHE)
    t = torch.export.Dim("T", min=1, max=max_t)
    return ex, ex.export(input_ids=_tokens(0, 4), cache_position=torch.arange(4),
                         dynamic_shapes={"input_ids": {1: t}, "cache_position": {0: t}},
                         strict=False)


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_transformers_prompt_lengths_and_decode_in_one_dynamic_method(tmp_path, name):
    """One method, any length up to its bound: prompts of 5 and 3 tokens then single-token
    decodes, each call equal to transformers' eager module, the caches carried between calls."""
    from hf_models import _eager, _model, _tokens
    _, ep = _hf_prefill(name)
    path = tte.reference.export(ep, str(tmp_path / f"{name}.pte"))
    prog = load(path)
    eager = _eager(_model(name))
    at = 0
    for t in (5, 1, 1, 3, 1):
        ids, pos = _tokens(at, t), torch.arange(at, at + t)
        at += t
        with torch.no_grad():
            want = eager(input_ids=ids, cache_position=pos)
        got = prog.run(ids, pos)[0]
        assert tuple(got.shape) == (1, t, 64)
        torch.testing.assert_close(got, want, msg=lambda m: f"{name} T={t} at {at - t}: {m}")


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_transformers_dynamic_prefill_and_decode_share_their_caches(tmp_path, name):
    """Two methods of one `.pte`: prefill (dynamic length) and decode (one token) on the same
    caches in the same memory: decode after a prefill of 5, and after `reset()` a prefill of 2,
    equals eager; decode's caches move 0 bytes (aliased), the counters their 8 bytes."""
    from hf_models import _eager, _model, _tokens
    ex, prefill = _hf_prefill(name)
    decode = ex.export(input_ids=_tokens(0), cache_position=torch.tensor([0]))
    path = tte.reference.export({"prefill": (prefill, None), "decode": (decode, None)},
                                str(tmp_path / f"{name}.pte"), share_mutable_buffers=True)
    prog = load(path, method="decode")
    for prompt in (5, 2):
        prog.reset()
        eager = _eager(_model(name))
        ids, pos = _tokens(0, prompt), torch.arange(prompt)
        with torch.no_grad():
            want = eager(input_ids=ids, cache_position=pos)
        torch.testing.assert_close(prog.run(ids, pos, method="prefill")[0], want)
        for s in range(prompt, prompt + 3):
            ids, pos = _tokens(s), torch.tensor([s])
            with torch.no_grad():
                want = eager(input_ids=ids, cache_position=pos)
            torch.testing.assert_close(prog.run(ids, pos)[0], want,
                                       msg=lambda m: f"{name} decode at {s}: {m}")
    traffic = prog.state_traffic()
    caches = {f: b for f, b in traffic.items() if "cumulative_length" not in f}
    assert caches and set(caches.values()) == {0}, traffic
    assert {b for f, b in traffic.items() if "cumulative_length" in f} == {8}


def test_the_toy_prefill_and_decode_methods_share_the_cache(tmp_path):
    """`torch_tensorrt.executorch.export({...})` of a dynamic prefill and a one-token decode
    compiled separately: decode continues from the cache prefill wrote."""
    torch_tensorrt = torch_tensorrt_or_skip()
    import torch_tensorrt.executorch  # noqa: F401, F811
    torch.manual_seed(0)
    model = PrefillCache().eval()
    eager = copy.deepcopy(model)
    with tte.reference.engines():
        pre = torch_tensorrt.compile(_export(model), ir="dynamo",
                                     arg_inputs=list(prefill_args(4)), min_block_size=1)
        dec = torch_tensorrt.compile(torch.export.export(model, prefill_args(1)), ir="dynamo",
                                     arg_inputs=list(prefill_args(1)), min_block_size=1)
        programs = {
            "prefill": torch_tensorrt.dynamo.export(pre, arg_inputs=list(prefill_args(4)),
                                                    dynamic_shapes=prefill_dims()),
            "decode": torch_tensorrt.dynamo.export(dec, arg_inputs=list(prefill_args(1)))}
        et = torch_tensorrt.executorch.export(programs).to_executorch()
    path = tmp_path / "pd.pte"
    path.write_bytes(et.buffer)
    prog = load(path, method="decode")
    x, pos = prefill_args(5)
    with torch.no_grad():
        want = eager(x, pos)
    torch.testing.assert_close(prog.run(x, pos, method="prefill")[0], want)
    for at in range(5, 9):
        x, pos = prefill_args(1, at)
        with torch.no_grad():
            want = eager(x, pos)
        torch.testing.assert_close(prog.run(x, pos)[0], want)
        torch.testing.assert_close(prog.state()["k_cache"], eager.k_cache)


def _executorch_llama(dynamic: bool = True):
    """ExecuTorch's own llama (`construct_transformer`) as its export builds it: with
    `enable_dynamic_shape` the rope tables and the mask are sliced at `input_pos[-1].item()` and
    the caches written with `index_copy_` at `arange(T) + input_pos[0].item()`."""
    from executorch.examples.models.llama import llama_transformer, model_args
    from hybrid_models import Decoder
    args = model_args.ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=128,
                                max_seq_len=16, max_context_len=16, use_kv_cache=True,
                                enable_dynamic_shape=dynamic, hidden_dim=128)
    torch.manual_seed(0)
    return Decoder(llama_transformer.construct_transformer(args)).eval()


def _llama_steps(prompt: int, decodes: int, seed: int):
    """(tokens, input_pos) of a prompt then one-token decodes, as ExecuTorch's runner calls."""
    g = torch.Generator().manual_seed(seed)
    yield torch.randint(0, 128, (1, prompt), generator=g), torch.tensor([0])
    for at in range(prompt, prompt + decodes):
        yield torch.randint(0, 128, (1, 1), generator=g), torch.tensor([at])


def test_executorch_llama_with_dynamic_shape_prefills_then_decodes_like_eager(tmp_path):
    """ExecuTorch's llama with `enable_dynamic_shape=True`, exported as its own export does (one
    method, the token count dynamic up to 8): a prompt of 5 then decodes, and after `reset()` a
    prompt of 3 then decodes, equal eager in the compiled module and in the `.pte`, the state
    carried from prefill into decode. Its engines read the start position as a scalar input:
    bounded by the program's own checks (`0 <= start <= 14`, `start + T <= 16`), which the
    partitions' exports are given (`payload.bind_scalar_reads`). Every cache is written in place
    by its engine — T consecutive positions from a runtime start (patch 0008) — and moves 0
    bytes per call (each was copied back through a host index_put before)."""
    model = _executorch_llama()
    t = torch.export.Dim("T", max=8)
    ep = torch.export.export(model, (torch.randint(0, 128, (1, 4)), torch.tensor([0])),
                             dynamic_shapes=({1: t}, {0: 1}), strict=False)
    compiled = tte.reference.compile(ep)
    caches = [w.fqn for w in compiled.plan if w.fqn.endswith(("k_cache", "v_cache"))]
    assert len(caches) == 4 and {compiled.plan[f].kind.name for f in caches} == {"KV_ALIAS"}, \
        str(compiled.plan)
    prog = load(tte.reference.export(ep, str(tmp_path / "llama.pte")))
    for prompt, seed in ((5, 0), (3, 1)):
        eager, mine = copy.deepcopy(model), copy.deepcopy(compiled)
        prog.reset()
        for k, (tokens, pos) in enumerate(_llama_steps(prompt, 3, seed)):
            with torch.no_grad():
                want = eager(tokens, pos)
                torch.testing.assert_close(mine(tokens, pos), want)
            torch.testing.assert_close(prog.run(tokens, pos)[0], want,
                                       msg=lambda m: f"prompt {prompt} call {k}: {m}")
        for fqn, value in prog.state().items():
            torch.testing.assert_close(value, eager.get_buffer(fqn), msg=fqn)
    assert {f: prog.state_traffic()[f] for f in caches} == dict.fromkeys(caches, 0)
    with pytest.raises(InputShapeError, match=r"dynamic input 0 takes shapes at most \[1,8\]; "
                                              r"this call gives \[1,9\]"):
        prog.run(torch.zeros(1, 9, dtype=torch.long), torch.tensor([0]))


def test_executorch_llama_with_dynamic_shape_saves_with_tensorrt_rtx_scalars_bound_as_tensors(
        tmp_path):
    """TensorRT-RTX takes the start position (and the length) as symbolic scalar inputs of an
    engine: each is handed to the delegate as a 0-d tensor of the engine's recorded
    dtype — the runtime binds a shape tensor through a host copy of its value — so the dynamic
    llama saves (it was refused, naming the engine), every state write verified by the save. The
    converters alias every cache (IKVCacheUpdateLayer writing T positions from the start, patch
    0008): each stays on cuda:0 and no copy of it is made, by the program or the delegate."""
    torch_tensorrt = torch_tensorrt_or_skip()
    t = torch.export.Dim("T", min=1, max=8)
    example = (torch.randint(0, 128, (1, 4)), torch.tensor([0]))
    ep = torch.export.export(_executorch_llama(), example, dynamic_shapes=({1: t}, {0: 1}),
                             strict=False)
    trt = compile_rtx(ep, example)
    caches = {w.fqn for w in trt.mutation_plan if w.fqn.endswith(("k_cache", "v_cache"))}
    assert len(caches) == 4 and set(recorded_aliasing(trt)) == caches
    assert {trt.mutation_plan[f].kind.name for f in caches} == {"KV_ALIAS"}
    scalars = {e["name"] for m in trt.children()
               for e in ((getattr(m, "symbolic_shape_expressions", None) or {}).get("inputs")
                         or []) if isinstance(e, dict) and e.get("is_scalar")}
    assert scalars, "the engines take no symbolic scalar: nothing tested"
    from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
    for legacy in (False, True):     # both exporters inline the engines
        path = tmp_path / f"dynamic_llama_rtx_{legacy}.pte"
        torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=list(example),
                            dynamic_shapes=({1: t}, {0: 1}), use_legacy_exporter=legacy)
        method = inspect_pte(path.read_bytes()).method("forward")
        assert {(b.fqn, b.kind, b.device, b.program_copy_bytes, b.delegate_copy_bytes)
                for b in method.buffers if b.fqn in caches} == \
            {(f, "kv_alias", "cuda:0", 0, 0) for f in caches}
        bound = {b[0]: b for d in method.delegates for b in d.bindings if b[3]}
        assert scalars <= set(bound)
        assert all(bound[s][2] == () for s in scalars), [bound[s] for s in scalars]


# --- every save path of the matrix, TensorRT-RTX engines built ahead of time --------------------

@pytest.fixture(scope="module")
def rtx_prefill():
    torch_tensorrt = torch_tensorrt_or_skip()
    specs = prefill_input_specs(torch_tensorrt)
    model = PrefillCache().eval()
    return model, specs, compile_rtx(_export(copy.deepcopy(model)), specs)


@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_every_save_path_keeps_the_length_dynamic_and_declares_each_write(
        tmp_path, monkeypatch, rtx_prefill, cell):
    """The save matrix (`upstream_matrix.CELLS`) with a dynamic length: the module saved with
    its `torch_tensorrt.Input` specs, an ExportedProgram of it with `dynamic_shapes`. Every
    artifact declares each write once by FQN; programs keep the length symbolic; `.pte` files
    pass the matrix's checks and bound every dynamic engine binding."""
    torch_tensorrt = torch_tensorrt_or_skip()
    model, specs, trt = rtx_prefill
    captured = []
    if cell.fmt == "aot_inductor":
        monkeypatch.setattr(torch._inductor, "aoti_compile_and_package",
                            lambda ep, **kw: captured.append(ep))
    path = tmp_path / ("m." + {"executorch": "pte", "aot_inductor": "pt2"}.get(cell.fmt, "ep"))
    if cell.source == "ep":
        source = torch_tensorrt.dynamo.export(trt, arg_inputs=list(prefill_args(4)),
                                              dynamic_shapes=prefill_dims())
        torch_tensorrt.save(source, str(path), output_format=cell.fmt)
    else:
        torch_tensorrt.save(trt, str(path), output_format=cell.fmt, arg_inputs=specs,
                            retrace=cell.retrace, use_legacy_exporter=cell.legacy)
    if cell.fmt == "executorch":
        info = inspect_pte(path.read_bytes()).method("forward")
        # the T-position write is PyTorch's (no TensorRT-RTX converter takes a dynamic
        # index_copy), so the cache is the program's copy-back, on the host, saying why
        assert [(b.fqn, b.kind, b.initial_value, b.program_copy_bytes) for b in info.buffers] \
            == [("k_cache", "copy_back", True, 512)]
        assert info.buffers[0].host_path == \
            "host kernels touch it or its new value: aten::index_put"
        assert {w.fqn: w.kind.name for w in trt.mutation_plan} == {"k_cache": "COPY_BACK"}
        dynamic = {(d.index, b[0]) for d in info.delegates for b in d.bindings if -1 in b[2]}
        assert dynamic and dynamic == {(d.index, n) for d in info.delegates
                                       for n, _ in d.max_shapes}
        return
    ep = captured[0] if cell.fmt == "aot_inductor" else torch.export.load(str(path))
    assert declared(ep) == expected_declarations(trt.mutation_plan)
    x = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "x")
    assert isinstance(x.meta["val"].shape[1], torch.SymInt)


def test_only_axes_the_program_sizes_by_one_symbol_are_unified():
    """`unify_shared_dims` reads the compiled module's placeholders: axes sized by one symbol
    get one Dim (bounds intersected), independent axes keep their own."""
    from torch_tensorrt_ext.seams.dynamic_specs import unify_shared_dims

    class Two(torch.nn.Module):
        def forward(self, x, pos, other):
            return x.sum(1) + pos.sum() + other.sum()

    a, b = torch.export.Dim("A", min=1, max=16), torch.export.Dim("B", min=2, max=9)
    gm = torch.export.export(Two(), (torch.randn(1, 4, 8), torch.arange(4), torch.randn(5)),
                             dynamic_shapes=({1: a}, {0: a}, {0: b})).module()
    given = {"x": {1: torch.export.Dim("x_1", min=1, max=16)},
             "pos": {0: torch.export.Dim("pos_0", min=2, max=12)},
             "other": {0: torch.export.Dim("other_0", min=2, max=9)}}
    got = unify_shared_dims(gm, given)
    assert got["x"][1] is got["pos"][0]
    assert (got["x"][1].min, got["x"][1].max) == (2, 12)
    assert got["other"][0] is given["other"][0]


# --- dynamic shapes in every form users write --------------------------------------------------
# each form was refused before: cond at save ("Node true_graph_0 ... references nonexistent
# attribute"), scatter_add at compile (its length specialized by torch-tensorrt's unrolled
# decomposition: "engine binding 'pos' has dimension 0 = 4"), a start read with `.item()` in a
# one-token method at compile ("GuardOnDataDependentSymNode ... u < 0")

PROMPTS, DECODES = (4, 1, 7), 3     # 12 positions, then 3 decodes: 15 of the 16-position cache


def _calls(prompts=PROMPTS, decodes=DECODES):
    """(length, start) of each call: prompts of several lengths, then one-token decodes."""
    at = 0
    for t in (*prompts, *(1,) * decodes):
        yield t, at
        at += t


def _steps_like_eager(run, eager, state, calls, what):
    """Each call's output and every buffer by FQN after it equal eager's."""
    for t, start in calls:
        x, pos = prefill_args(t, start, generator=torch.Generator().manual_seed(start))
        with torch.no_grad():
            want = eager(x, pos)
        torch.testing.assert_close(run(x, pos), want, msg=lambda m: f"{what} T={t}@{start}: {m}")
        for fqn, value in state().items():
            torch.testing.assert_close(value, eager.get_buffer(fqn),
                                       msg=lambda m: f"{what} {fqn} after T={t}@{start}: {m}")


def _compiled_and_pte(model, example, dims, path):
    torch_tensorrt = torch_tensorrt_or_skip()
    ep = torch.export.export(model, example, dynamic_shapes=dims)
    with tte.reference.engines():
        trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(example), min_block_size=1)
        kw = {"dynamic_shapes": dims} if dims is not None else {}
        torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=list(example),
                            **kw)
    return trt, load(path)


def _buffers(module):
    return lambda: dict(module.named_buffers())


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_in_a_one_token_static_method_decodes_like_eager(tmp_path, form):
    """A static one-token method: six decodes, compiled module and `.pte`, like eager. (First
    of the forms' tests: after a dynamic compile of the same form in the process, the start
    write's compile passed even without its fix.)"""
    torch.manual_seed(0)
    model = FORMS[form]().eval()
    eagers = copy.deepcopy(model), copy.deepcopy(model)
    trt, prog = _compiled_and_pte(model, prefill_args(1), None, tmp_path / "m.pte")
    calls = list(_calls((), 6))
    _steps_like_eager(lambda x, p: trt(x, p), eagers[0], _buffers(trt), calls, "compiled")
    _steps_like_eager(lambda x, p: prog.run(x, p)[0], eagers[1], prog.state, calls, "pte")


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_prefills_every_length_then_decodes_like_eager(tmp_path, form):
    """A dynamic-length method: the compiled module and the `.pte`, prompts of 4, 1, 7 then
    decodes, each output and every buffer equal eager's."""
    torch.manual_seed(0)
    model = FORMS[form]().eval()
    eagers = copy.deepcopy(model), copy.deepcopy(model)
    trt, prog = _compiled_and_pte(model, prefill_args(4), prefill_dims(), tmp_path / "m.pte")
    _steps_like_eager(lambda x, p: trt(x, p), eagers[0], _buffers(trt), _calls(), "compiled")
    _steps_like_eager(lambda x, p: prog.run(x, p)[0], eagers[1], prog.state, _calls(), "pte")


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_as_a_dynamic_prefill_and_a_one_token_decode_of_one_program(tmp_path, form):
    """Two methods of one `.pte` (`tte.reference.export({...})`): a prompt of 5 by the dynamic
    prefill, decodes by the static one; after `reset()` a prompt of 2 and decodes — every buffer
    by FQN equal to eager's after every call."""
    torch.manual_seed(0)
    model = FORMS[form]().eval()
    prefill = torch.export.export(model, prefill_args(4), dynamic_shapes=prefill_dims())
    decode = torch.export.export(model, prefill_args(1))
    prog = load(tte.reference.export({"prefill": (prefill, None), "decode": (decode, None)},
                                     str(tmp_path / "pd.pte")), method="decode")
    for prompt in (5, 2):
        prog.reset()
        eager = copy.deepcopy(model)
        calls = list(_calls((prompt,), DECODES))
        _steps_like_eager(lambda x, p: prog.run(x, p, method="prefill")[0], eager, prog.state,
                          calls[:1], f"prefill {prompt}")
        _steps_like_eager(lambda x, p: prog.run(x, p)[0], eager, prog.state, calls[1:],
                          f"decode after {prompt}")


@pytest.mark.parametrize("op", ScatterPrefill.OPS)
def test_every_scatter_and_index_write_keeps_the_length_dynamic(tmp_path, op):
    """Each scatter / index write the converters take, at T runtime positions: the compiled
    module and the `.pte` like eager for every length (scatter_add and a sum scatter_reduce were
    refused: torch-tensorrt unrolls them over the length, `lowering.dynamic_scatters`)."""
    torch.manual_seed(0)
    model = ScatterPrefill(op).eval()
    eagers = copy.deepcopy(model), copy.deepcopy(model)
    trt, prog = _compiled_and_pte(model, prefill_args(4), prefill_dims(), tmp_path / "m.pte")
    _steps_like_eager(lambda x, p: trt(x, p), eagers[0], _buffers(trt), _calls(), "compiled")
    _steps_like_eager(lambda x, p: prog.run(x, p)[0], eagers[1], prog.state, _calls(), "pte")
