"""Every program the runtime runs has a temp allocator that serves what its
kernels ask for — the reference engine's payload included — so a correct run writes no ExecuTorch
error line, in the compiled module called from PyTorch (`tte::execute_engine`, engines/execute_op)
and in the `.pte` (the C++ reference engine inside the delegate).

Found here: a sampling head's `topk` over a 131072-token vocabulary (Llama 3's is 128256) asks
ExecuTorch's kernel for 2 MiB of scratch; the C++ reference engine gave its payload a fixed 1 MiB
temp arena, so the `.pte`'s every call failed ("Memory allocation failed: 2097152B requested ...,
1048576B available", "Failed to allocate temp memory", the delegate refused). Its arena now grows
to what its kernels ask for (runtime/src/scratch_arena.h). ExecuTorch's llama with its custom SDPA
is held to the same silence in test_llama_custom_ops_quiet.py.
"""
from __future__ import annotations

import copy

import pytest
import torch
from helpers import executorch_error_lines

import torch_tensorrt_ext as tte

pytestmark = pytest.mark.inspects_pte

VOCAB, DIM, K, STEPS = 131072, 8, 4, 3


class TopKHead(torch.nn.Module):
    """A decoder's last step as exports that sample in the graph write it: logits over the
    vocabulary, a step counter, the top-k candidates."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        self.register_buffer("step", torch.zeros(1))

    def forward(self, h):
        self.step.add_(1)
        values, indices = torch.topk(self.head(h) + self.step, K)
        return values, indices


def _args(step: int) -> tuple[torch.Tensor]:
    return (torch.randn(1, DIM, generator=torch.Generator().manual_seed(step)),)


def _steps_like_eager(run, eager, state) -> None:
    for step in range(STEPS):
        with torch.no_grad():
            want = eager(*_args(step))
            got = run(*_args(step))
        torch.testing.assert_close(got[0], want[0], msg=lambda m: f"step {step}: {m}")
        assert torch.equal(got[1], want[1]), f"step {step}: {got[1]} != {want[1]}"
    torch.testing.assert_close(state(), eager.step)


def _left_to_pytorch(gm: torch.fx.GraphModule) -> set[str]:
    """The ops the compiled module runs in PyTorch (its graphs outside the engines)."""
    return {str(n.target) for m in gm.modules() if isinstance(m, torch.fx.GraphModule)
            for n in m.graph.nodes if n.op == "call_function"}


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return TopKHead().eval()


def test_the_compiled_module_steps_like_eager_without_error_lines(model, capfd):
    compiled = tte.reference.compile(copy.deepcopy(model), _args(0))
    assert "aten.topk.default" not in _left_to_pytorch(compiled.gm)   # the engine runs it
    capfd.readouterr()
    _steps_like_eager(compiled, copy.deepcopy(model), lambda: compiled.gm.get_buffer("step"))
    assert executorch_error_lines(capfd.readouterr().err) == []


def test_the_pte_steps_like_eager_without_error_lines(model, tmp_path, capfd):
    path = tte.reference.export(copy.deepcopy(model), _args(0), str(tmp_path / "topk.pte"))
    prog = tte.executorch.load(path)
    capfd.readouterr()
    _steps_like_eager(prog.run, copy.deepcopy(model), lambda: prog.state()["step"])
    assert executorch_error_lines(capfd.readouterr().err) == []
