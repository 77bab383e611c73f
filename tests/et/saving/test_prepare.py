"""What ExecuTorch's lowering is handed (`executorch.saving.prepare`): an engine that only writes
state in place — hands the program nothing it reads — is refused at save naming the engine, the
buffer and what to change, on both engine kinds, and nothing is written. (ExecuTorch 1.5.1 failed on
an
internal assertion lowering a reference delegate without outputs; its edge passes dropped the
TensorRT engine's call, and the save then refused the first engine's blob for an unrelated
reason.) Found by the generator's `kv_run` writes."""
from __future__ import annotations

import pytest
import torch

import torch_tensorrt_ext as tte
from rtx_env import compile_rtx, torch_tensorrt_or_skip
from torch_tensorrt_ext.errors import Unsupported


class WriteOnly(torch.nn.Module):
    """Two positions from a start read on the host; the cache is not read after the write, so the
    engine holding the write has no output the program reads."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.register_buffer("k", torch.zeros(1, 2, 8, 4))

    def forward(self, x, p):
        h = self.proj(x)
        start = p[0].item()
        torch._check(start >= 0)
        torch._check(start <= 6)
        self.k.index_copy_(2, torch.arange(2) + start, h.reshape(1, 2, 1, 4).expand(-1, -1, 2, -1))
        return h * 2


ARGS = (torch.randn(1, 8), torch.tensor([3]))
WHY = ("engine '_run_on_acc_2' writes ['k'] in place and hands the program nothing it reads: "
       "ExecuTorch's lowering would drop the call or fail on a delegate without outputs")


@pytest.mark.parametrize("kind", ["reference", "tensorrt_rtx"])
def test_an_engine_that_only_writes_in_place_is_refused_naming_it(tmp_path, kind):
    torch_tensorrt = torch_tensorrt_or_skip()
    ep = torch.export.export(WriteOnly().eval(), ARGS)
    if kind == "reference":
        with tte.reference.engines():
            trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(ARGS),
                                         min_block_size=1)
    else:
        trt = compile_rtx(ep, ARGS)
    assert trt.mutation_plan["k"].is_kv          # compiled: the engine writes it in place
    path = tmp_path / "m.pte"
    with pytest.raises(Unsupported, match=WHY.replace("[", r"\[").replace("]", r"\]")):
        torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=list(ARGS))
    assert not path.exists() and list(tmp_path.iterdir()) == []
