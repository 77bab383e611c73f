"""ExecuTorch's default llama cache write `k_cache[:, :, input_pos] = k_val` (an `index_put`)
through real TensorRT-RTX conversion (the patched `torch_tensorrt.compile`, engines built on this
CPU machine): the plan's rewrite to the KV form yields an `IKVCacheUpdateLayer` — the converters
record the aliasing for exactly the planned caches. Parity of the same rewrite is checked on the
reference pipeline in test_llama_executorch.py (TensorRT-RTX engines cannot run here)."""
from __future__ import annotations

import pytest
from llama_layers import _args, _kv, _ring
from rtx_env import compile_rtx, recorded_aliasing, torch_tensorrt_or_skip


@pytest.mark.parametrize("factory,engine_caches", [(_kv, ("kv.k_cache", "kv.v_cache")),
                                                   (_ring, ("kv.k_cache", "kv.v_cache"))],
                         ids=["KVCache", "RingKVCache"])
def test_index_put_cache_write_converts_to_an_aliased_kv_update_layer(factory, engine_caches):
    torch_tensorrt_or_skip()
    trt = compile_rtx(factory(False).eval(), _args(0))
    plan = trt.mutation_plan
    recorded = recorded_aliasing(trt)
    assert sorted(recorded) == sorted(w.fqn for w in plan if w.is_kv) == list(engine_caches)
    for fqn in engine_caches:
        w = plan[fqn]
        assert w.op == "aten.index_put.default"
        assert w.reason.startswith("index_put of one position rewritten to index_copy")
        engine, output, inp = recorded[fqn]
        assert (w.engine, w.output_binding, w.input_binding) == (engine, output, inp)
