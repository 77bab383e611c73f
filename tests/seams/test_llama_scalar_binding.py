"""A symbolic scalar an engine takes as an input — what torch-tensorrt's partitioner hands an
engine for ExecuTorch's dynamic llama cache (`start_pos = input_pos[0].item()` feeding
`arange(seq) + start_pos` and `index_copy_`) — is bound as a 0-d tensor: every binding of the
reference payload is a tensor, and the payload computes what eager computes for each position."""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from torch_tensorrt_ext.engines.execute_op import run_payload
from torch_tensorrt_ext.engines.payload import scalar_inputs_as_tensors, to_executorch_program

aten = torch.ops.aten


def _partition_with_symint_input() -> torch.fx.GraphModule:
    """(x, start_pos: SymInt, cache) -> (cache.index_copy(2, arange(1) + start_pos, x),)"""
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    g = torch.fx.Graph()
    x, pos, cache = g.placeholder("x"), g.placeholder("start_pos"), g.placeholder("cache")
    with mode:
        x.meta["val"] = torch.empty(1, 2, 1, 4)
        cache.meta["val"] = torch.empty(1, 2, 8, 4)
        pos.meta["val"] = env.create_unbacked_symint()
        ar = g.call_function(aten.arange.default, (1,), {"dtype": torch.int64})
        ar.meta["val"] = torch.arange(1)
        idx = g.call_function(aten.add.Tensor, (ar, pos))
        idx.meta["val"] = ar.meta["val"] + pos.meta["val"]
        out = g.call_function(aten.index_copy.default, (cache, 2, idx, x))
        out.meta["val"] = torch.empty(1, 2, 8, 4)
    g.output((out,))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_symint_engine_input_is_bound_as_a_0d_int64_tensor():
    gm = _partition_with_symint_input()
    assert scalar_inputs_as_tensors(gm) == ((1, torch.int64),)
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    assert [(tuple(v.shape), v.dtype) for v in vals] == [
        ((1, 2, 1, 4), torch.float32), ((), torch.int64), ((1, 2, 8, 4), torch.float32)]
    payload = to_executorch_program(gm)
    cache = torch.zeros(1, 2, 8, 4)
    for step in range(8):
        x = torch.full((1, 2, 1, 4), float(step + 1))
        got = run_payload(payload, [x, torch.scalar_tensor(step, dtype=torch.int64), cache])[0]
        want = cache.index_copy(2, torch.tensor([step]), x)
        torch.testing.assert_close(got, want)
        cache = want


def test_a_graph_without_scalar_inputs_is_left_alone():
    gm = _partition_with_symint_input()
    scalar_inputs_as_tensors(gm)
    code = gm.code
    assert scalar_inputs_as_tensors(gm) == ()
    assert gm.code == code
