"""Every `.pte` an end-to-end test writes is also read back by `torch-tensorrt-ext inspect`.

With $TTE_DEVICE set ("emulated"; "cuda" on a GPU machine) the session runs with that device in
force (`runtime_lib.use_device`): with $TTE_REFERENCE_DEVICE=cuda:0 too, every program the tests
save keeps its state in device memory, which on the emulated device faults on any host access
(test_emulated_device runs the end-to-end suites so).

After each test marked `inspects_pte` (a module's `pytestmark`) that used `tmp_path`, every
`*.pte` left there
goes through `inspect_pte` (the `inspect` command's reader): it must parse, every TensorRTBackend
delegate must be a valid blob, and every mutable buffer must carry its FQN and initial value.
Tests that write hostile files on purpose are marked `writes_bad_pte` (or live elsewhere).

The GPU tier (`gpu/`, marker `gpu`) needs a CUDA device: where the driver finds none the folder is
skipped as a whole, with one line saying why (`gpu_env.cuda_missing`). With $TTE_DEVICE_BUNDLE set
(its bundle mode) nothing else is collected.

Test support — paths, models, harnesses shared by several test files — lives in `support/`, put on
`sys.path` here, so a test imports it by module name (`from helpers import REPO`). The folders
follow the package's layers; the ExecuTorch layer's tests are in `et/` (a folder per
job, as in `executorch/`), not `executorch/`: `executorch` is a namespace package, so a
`tests/executorch` folder on the path would join it ahead of the installed one
(`executorch.__path__[0]` would be the tests' folder).

torch's table of composite-implicit ops, which torch recomputes on every `run_decompositions`, is
kept per operator registry for the session (`torch_tables.memoize_cia_table`: the same table,
recomputed and compared every 64 lookups; ~12 % of an end-to-end file's time); $TTE_CIA_MEMO=0
runs torch's own function. Each decomposition's ~10^4 `py_impl` calls build annotation objects
nothing reads: the session runs torch's method recompiled with postponed annotations
(`torch_annotations.lazy_py_impl_annotations`); $TTE_LAZY_ANNOTATIONS=0 keeps torch's. The
cyclic collector's young generation is collected every 10^4 net allocations, not 700
(`gc_threshold`: a quarter of a compile's time went to the collector); $TTE_GC_YOUNG=700 is
Python's own.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))
if os.environ.get("TTE_CIA_MEMO", "1") != "0":
    from torch_tables import memoize_cia_table
    memoize_cia_table()
if os.environ.get("TTE_LAZY_ANNOTATIONS", "1") != "0":
    from torch_annotations import lazy_py_impl_annotations
    lazy_py_impl_annotations()
from gc_threshold import raise_young_threshold  # noqa: E402 - support/ is on the path only now
raise_young_threshold()
GPU_TIER = Path(__file__).resolve().parent / "gpu"
# In bundle mode (a GPU machine with python3 and pytest alone: tests/gpu) only the GPU tier can be
# imported, so a plain `pytest -m gpu` collects nothing else.
if os.environ.get("TTE_DEVICE_BUNDLE"):
    collect_ignore = [p.name for p in GPU_TIER.parent.iterdir()
                      if p.is_dir() and p.name not in ("gpu", "support")]


class _WithoutCuda(pytest.Dir):
    """tests/gpu on a machine without a CUDA device: one skip for the whole folder."""

    why = ""

    def collect(self):
        pytest.skip(f"the GPU tier (tests/gpu) needs CUDA: {self.why}")


def pytest_collect_directory(path, parent):
    if Path(path) == GPU_TIER:
        from gpu_env import cuda_missing
        why = cuda_missing()
        if why is not None:
            tier = _WithoutCuda.from_parent(parent, path=Path(path))
            tier.why = why
            return tier
    return None


def pytest_configure(config):
    if os.environ.get("TTE_DEVICE"):
        from torch_tensorrt_ext import runtime_lib
        runtime_lib.use_device(os.environ["TTE_DEVICE"])


@pytest.fixture(autouse=True)
def _inspect_every_pte(request):
    wanted = request.node.get_closest_marker("inspects_pte") is not None \
        and "tmp_path" in request.fixturenames \
        and request.node.get_closest_marker("writes_bad_pte") is None
    tmp = request.getfixturevalue("tmp_path") if wanted else None   # torn down after this one
    yield
    if tmp is None:
        return
    from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
    for path in sorted(tmp.rglob("*.pte")):
        info = inspect_pte(path.read_bytes())
        for method in info.methods:
            for b in method.buffers:
                assert b.fqn and b.initial_value, f"{path.name} {method.name}: {b}"
            for d in method.delegates:
                assert d.backend != "TensorRTBackend" or d.magic == "TR03", (path.name, d)
