"""partition_outputs: a partition never returns an aliased cache write last while it has
a plain output, so torch-tensorrt's engine module (which hides the aliased outputs after its last
plain one) returns every output the graph reads.

Found by `scripts/generate_stateful.py --rtx`: a KV cache handed back after its write
(`return out, self.k`) could not be compiled with TensorRT-RTX engines — about 1 random program in
11 — because its aliased output was the partition's last and the engine module dropped it.
"""
from __future__ import annotations

import operator

import pytest
import torch
from torch.fx import Graph, GraphModule
from torch.fx.experimental.proxy_tensor import make_fx

from rtx_env import compile_rtx, engine_modules, getitem_users, recorded_aliasing
from rtx_env import torch_tensorrt_or_skip
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
from torch_tensorrt_ext.compiling.partition_outputs import aliased_outputs_returned

aten = torch.ops.aten


def _cache_write_then_plain(cache, v, x):
    return aten.slice_scatter.default(cache, v, 2, 3, 4), x * 2


def _plain_then_cache_write(cache, v, x):
    return x * 2, aten.slice_scatter.default(cache, v, 2, 3, 4)


def _cache_read_after_write(cache, v, x):   # not aliased: a later read sees the old cache
    new = aten.slice_scatter.default(cache, v, 2, 3, 4)
    return x * cache.sum(), new


def _two_cache_writes(cache, v, x):          # every output aliased: the module returns all
    return (aten.slice_scatter.default(cache, v, 2, 3, 4),
            aten.index_copy.default(x, 2, torch.tensor([1]), v))


INPUTS = (torch.zeros(1, 2, 8, 4), torch.ones(1, 2, 1, 4), torch.full((1, 2, 8, 4), 3.0))


def _partitioned(part, name="_run_on_acc_0", returns=(0, 1, 1)):
    """A parent calling partition `part` (traced with meta values, as torch-tensorrt's partitioner
    leaves them) and returning its results `returns` — by default result 0 and result 1 to the
    caller, then result 1 again as a buffer's new value (a lifted graph's write-back output)."""
    sub = make_fx(part)(*INPUTS)
    g = Graph()
    phs = [g.placeholder(n) for n in ("cache", "v", "x")]
    call = g.call_module(name, tuple(phs))
    items = [g.call_function(operator.getitem, (call, k)) for k in range(2)]
    g.output(tuple(items[k] for k in returns))
    return GraphModule({name: sub}, g), sub


def _outputs(sub):
    return [n.name for n in sub.graph.output_node().args[0]]


def test_a_cache_write_returned_last_moves_before_the_plain_output_and_reads_follow():
    parent, sub = _partitioned(_plain_then_cache_write)
    want = parent(*INPUTS)
    assert _outputs(sub) == ["mul", "slice_scatter"]
    aliased_outputs_returned(parent)
    assert _outputs(sub) == ["slice_scatter", "mul"]
    call = next(n for n in parent.graph.nodes if n.op == "call_module")
    assert sorted(getitem_users(call)) == [0, 1]
    got = parent(*INPUTS)                     # the same values, in the caller's order
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_a_cache_write_read_by_a_later_node_moves_too():
    parent, sub = _partitioned(_plain_then_cache_write, returns=(0, 1))
    out = parent.graph.output_node()
    kv = out.args[0][1]
    with parent.graph.inserting_before(out):
        total = parent.graph.call_function(torch.sum, (kv,))
    out.args = ((out.args[0][0], total, kv),)
    parent.recompile()
    want = parent(*INPUTS)
    aliased_outputs_returned(parent)
    assert _outputs(sub) == ["slice_scatter", "mul"]
    assert all(torch.equal(a, b) for a, b in zip(parent(*INPUTS), want, strict=True))


@pytest.mark.parametrize("part", [_cache_write_then_plain, _cache_read_after_write,
                                  _two_cache_writes], ids=lambda f: f.__name__.strip("_"))
def test_a_partition_the_module_already_returns_whole_is_left_as_it_is(part):
    parent, sub = _partitioned(part)
    before, code = _outputs(sub), parent.code
    aliased_outputs_returned(parent)
    assert (_outputs(sub), parent.code) == (before, code)


def test_a_cache_write_that_is_only_its_buffers_write_back_stays_hidden():
    """Held once by the output, the new value is only the buffer's write-back, which the engine
    performs in place: the module keeps hiding it (no copy of the cache handed out per call)."""
    parent, sub = _partitioned(_plain_then_cache_write, returns=(0, 1))
    aliased_outputs_returned(parent)
    assert _outputs(sub) == ["mul", "slice_scatter"]


def test_a_partition_left_to_pytorch_is_not_reordered():
    parent, sub = _partitioned(_plain_then_cache_write, name="_run_on_gpu_0")
    aliased_outputs_returned(parent)
    assert _outputs(sub) == ["mul", "slice_scatter"]


class KvReturnedLast(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(1, 2, 8, 4))
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        self.k[:, :, 2:3, :] = self.lin(x)
        return x.sum() + 1, self.k


def test_a_kv_cache_returned_last_compiles_and_saves_with_tensorrt_rtx(tmp_path):
    """Ahead of time (the engines cannot run here): the engine module returns every output the
    graph reads, the cache stays aliased (written in place on cuda:0), and the .pte passes the
    save's verifier of every state write."""
    torch_tensorrt = torch_tensorrt_or_skip()
    from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import user_output_count
    model, args = KvReturnedLast().eval(), (torch.randn(1, 2, 1, 4),)
    trt = compile_rtx(model, args)
    assert recorded_aliasing(trt)["k"][0] == "_run_on_acc_0"
    for name, engine in engine_modules(trt).items():
        returned = user_output_count(list(engine.output_binding_names), engine.aliased_io)
        for call in (n for n in trt.graph.nodes if n.op == "call_module" and n.target == name):
            assert max(getitem_users(call), default=0) < returned, name
    torch_tensorrt.save(trt, str(tmp_path / "m.pte"), output_format="executorch",
                        arg_inputs=list(args))
    info = inspect_pte((tmp_path / "m.pte").read_bytes()).method("forward")
    (b,) = [b for b in info.buffers if b.fqn == "k"]
    assert (b.kind, b.device, b.program_copy_bytes, b.host_path) == ("kv_alias", "cuda:0", 0, "")
