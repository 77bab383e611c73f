"""The GPU runner's entry points on a machine without a GPU (CPU CI):

* the GPU stack's set-up (`scripts/setup.sh --gpu`, which `scripts/test.sh --gpu` tries on the
  spot) stops at once with one line where NVIDIA's package index (TensorRT's libraries) cannot be
  reached, before touching the environment — here the index is made unreachable on purpose, so
  the check behaves the same on every machine;
* the GPU tier (tests/gpu) is skipped as a whole, with one line naming CUDA (tests/conftest.py).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from gpu_env import cuda_missing
from helpers import REPO


def test_the_gpu_setup_stops_with_one_line_where_tensorrt_is_not_reachable():
    env = {**os.environ, "TTE_NVIDIA_INDEX": "http://127.0.0.1:9"}   # nothing listens on 9
    done = subprocess.run(["bash", "scripts/setup.sh", "--gpu"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "setup.sh --gpu: http://127.0.0.1:9 (TensorRT's libraries) is not reachable from this "
        "machine; run it on a GPU runner with access to NVIDIA's package index"]
    assert done.stdout == ""


@pytest.mark.skipif(cuda_missing() is None, reason="this machine has CUDA: the tier runs")
@pytest.mark.parametrize("marker", ([], ["-m", "gpu"]))
def test_without_cuda_the_gpu_tier_is_one_skip_naming_cuda(marker):
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0",
                           "tests/gpu", *marker], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 5, done.stdout[-3000:]   # pytest's "no tests ran": none collected
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1 and re.fullmatch(
        r"SKIPPED \[1\] tests/conftest\.py:\d+: the GPU tier \(tests/gpu\) needs CUDA: "
        + re.escape(cuda_missing()), skipped[0]), done.stdout[-3000:]
    assert done.stdout.splitlines()[-1].startswith("=") and " 1 skipped in " in \
        done.stdout.splitlines()[-1]
