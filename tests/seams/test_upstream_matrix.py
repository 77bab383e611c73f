"""`torch_tensorrt.compile` → `torch_tensorrt.save` on the project's stateful models, with real
TensorRT-RTX conversion and ahead-of-time engine builds on this CPU machine (the patched
upstream API, nothing of ours called directly).

Compile: the plan's KV set equals what the converters recorded for the built engines, the
reconciled plan names exactly the buffers eager writes. Save, along the whole matrix
(`upstream_matrix.CELLS`): every buffer declared exactly once by FQN; in `.pte` files zero copy
ops per KV buffer and one per copy-back buffer, TR03 blobs whose aliasing equals the plan,
engine bytes and initial values present.
"""
from __future__ import annotations

import pytest
import torch
from e2e_models import MODELS
from rtx_env import recorded_aliasing, torch_tensorrt_or_skip
from upstream_matrix import (
    CELLS,
    SAVE_MODELS,
    check_pte,
    compiled,
    declared,
    expected_declarations,
    nbytes,
)

from torch_tensorrt_ext.compiling.planned_lift import READS_OLD_CACHE

pytestmark = pytest.mark.inspects_pte

# the save matrix runs on these (KV index_copy / slice_scatter / write-only, nested FQNs, ring
# buffers, counters, strided, read-after-write, two writes, KV + copy-back in one model); every
# model of MODELS is compiled and checked against the converters


@pytest.mark.parametrize("name", sorted(MODELS))
def test_predicted_kv_equals_what_the_converters_aliased(name):
    model, _, predicted, trt = compiled(name)
    recorded = recorded_aliasing(trt)
    final = trt.mutation_plan
    # the one deliberate difference: a KV write whose cache is read again after it is copied
    # back (TensorRT would alias it; the later read must see the old value)
    stale = {w.fqn for w in final if READS_OLD_CACHE in w.reason}
    assert stale == ({"k"} if name == "reads_old_cache_after_write" else set())
    assert {w.fqn for w in predicted.kv()} - stale == set(recorded)
    assert final.fqns == predicted.fqns   # every buffer eager writes, none dropped
    assert {w.fqn for w in final.kv()} == set(recorded)
    for w in final.kv():
        engine, out, inp = recorded[w.fqn]
        assert (w.engine, w.output_binding, w.input_binding) == (engine, out, inp)


def test_buffers_keep_their_names_and_initial_values():
    model, _, _, trt = compiled("two_submodules")
    assert {n for n, _ in trt.named_buffers()} == {"left.k", "right.ring"}
    for n, b in trt.named_buffers():
        assert torch.equal(b, model.get_buffer(n))


def _save(tmp_path, name, cell, monkeypatch):
    torch_tensorrt = torch_tensorrt_or_skip()
    model, args, _, trt = compiled(name)
    captured = []
    if cell.fmt == "aot_inductor":  # what save hands AOTInductor (compiling it: one test below)
        monkeypatch.setattr(torch._inductor, "aoti_compile_and_package",
                            lambda ep, **kw: captured.append(ep))
    path = tmp_path / f"{name}.{ {'executorch': 'pte', 'aot_inductor': 'pt2'}.get(cell.fmt, 'ep')}"
    if cell.source == "ep":
        source = torch_tensorrt.dynamo.export(trt, arg_inputs=list(args))
        torch_tensorrt.save(source, str(path), output_format=cell.fmt)
    else:
        torch_tensorrt.save(trt, str(path), output_format=cell.fmt, arg_inputs=list(args),
                            retrace=cell.retrace, use_legacy_exporter=cell.legacy)
    return model, trt.mutation_plan, path, captured


@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
@pytest.mark.parametrize("name", SAVE_MODELS)
def test_save_declares_every_mutation_once(tmp_path, monkeypatch, name, cell):
    model, plan, path, captured = _save(tmp_path, name, cell, monkeypatch)
    if cell.fmt == "executorch":
        check_pte(path.read_bytes(), plan, nbytes(model))
        return
    ep = captured[0] if cell.fmt == "aot_inductor" else torch.export.load(str(path))
    assert declared(ep) == expected_declarations(plan)


def test_save_is_idempotent_on_a_declared_program():
    torch_tensorrt = torch_tensorrt_or_skip()
    _, args, _, trt = compiled("two_submodules")
    ep = torch_tensorrt.dynamo.export(trt, arg_inputs=list(args))
    from torch_tensorrt.dynamo._exporter import _declare_aliased_kv_mutations_on_ep
    once = _declare_aliased_kv_mutations_on_ep(ep)
    twice = _declare_aliased_kv_mutations_on_ep(once)
    assert twice is once
    assert declared(once) == expected_declarations(trt.mutation_plan)


def test_aot_inductor_package_is_built(tmp_path):
    """One real AOTInductor build of a program with a KV and a copy-back buffer."""
    torch_tensorrt = torch_tensorrt_or_skip()
    _, args, _, trt = compiled("two_submodules")
    path = tmp_path / "m.pt2"
    torch_tensorrt.save(trt, str(path), output_format="aot_inductor", arg_inputs=list(args))
    assert path.stat().st_size > 0
