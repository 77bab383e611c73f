"""ExecuTorch's llama with the custom SDPA and `llama::update_cache` ops (and its
int8 quantized KV cache) steps through this project's program loader (`tte.executorch.load`; the
C++ `tte_run` is the same loader, `tte_program_*`, but links no kernels for ExecuTorch's llama
ops) like eager, writing no error line to stderr: the loader gives each method a temp allocator,
as ExecuTorch's own runners do, so a kernel asking for scratch gets it instead of logging "No
temp allocator provided" on every call.

(ExecuTorch's own eager wrapper of these ops, `executorch.extension.llm.custom_ops`, logs that line
in PyTorch itself: only the `.pte`'s runs are held to silence here.)
"""
from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
from helpers import executorch_error_lines
from model_families import ModelProgram

import torch_tensorrt_ext as tte

pytestmark = pytest.mark.inspects_pte

pytest.importorskip("executorch.examples.models.llama.llama_transformer")

STEPS = 4
_STEP = """
import sys, torch
import torch_tensorrt_ext as tte
# the kernels of the llama ops and of the quantized cache's ops, as an app links them
from executorch.extension.llm.custom_ops import custom_ops
from executorch.kernels import quantized
prog, out = tte.executorch.load(sys.argv[1]), sys.argv[2]
torch.save([prog.run(*a)[0] for a in torch.load(sys.argv[3])], out)
"""


@pytest.fixture(scope="module", params=["llama_custom_sdpa", "llama_quantized_kv"])
def saved(request, tmp_path_factory):
    program = ModelProgram(request.param)
    path = tmp_path_factory.mktemp(request.param) / "llama.pte"
    model = program.build()
    eager = copy.deepcopy(model)
    tte.reference.export(model, program.args(0), str(path), strict=True)
    want = []
    for s in range(STEPS):
        with torch.no_grad():
            want.append(eager(*program.args(s)))
    return program, path, want


def test_the_python_loader_steps_it_like_eager_without_error_lines(saved, tmp_path):
    program, path, want = saved
    torch.save([program.args(s) for s in range(STEPS)], tmp_path / "args.pt")
    done = subprocess.run([sys.executable, "-c", _STEP, str(path), str(tmp_path / "out.pt"),
                           str(tmp_path / "args.pt")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert executorch_error_lines(done.stderr) == []
    for s, got in enumerate(torch.load(tmp_path / "out.pt")):
        torch.testing.assert_close(got, want[s], msg=lambda m: f"step {s}: {m}")

