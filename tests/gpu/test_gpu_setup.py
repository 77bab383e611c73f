"""The GPU runner's set-up in one command (`scripts/test.sh --gpu` → `scripts/setup.sh --gpu`):
where NVIDIA's package index (TensorRT's libraries) cannot be reached it stops at once with one
line saying so, before touching the environment. (Here the index is made unreachable on purpose,
so the check behaves the same on every machine; the install itself runs only on GPU runners.)"""
from __future__ import annotations

import os
import subprocess
from helpers import REPO

ROOT = REPO


def test_the_gpu_setup_stops_with_one_line_where_tensorrt_is_not_reachable():
    env = {**os.environ, "TTE_NVIDIA_INDEX": "http://127.0.0.1:9"}   # nothing listens on 9
    done = subprocess.run(["bash", "scripts/test.sh", "--gpu"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "setup.sh --gpu: http://127.0.0.1:9 (TensorRT's libraries) is not reachable from this "
        "machine; run it on a GPU runner with access to NVIDIA's package index"]
    assert done.stdout == ""
