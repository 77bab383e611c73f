"""The GPU tier's session: the runtime built with CUDA once (`cuda_runtime`), the device cases
(`case_dir`: from the bundle named by $TTE_DEVICE_BUNDLE, or built on the spot), and the
benchmark figures printed at the end of the run. Standard library and pytest only, like
gpu_env: the tier runs where only python3, pytest and CUDA are.

The build goes to $TTE_CUDA_BUILD_DIR (default: build-cuda/ in the checkout), incremental across
runs."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpu_env import FIGURES, REPO, STEPS, build_runtime, bundle


@pytest.fixture(scope="session")
def cuda_runtime():
    return build_runtime(Path(os.environ.get("TTE_CUDA_BUILD_DIR", REPO / "build-cuda")))


@pytest.fixture(scope="session")
def case_dir(tmp_path_factory):
    """name -> the case's folder: the bundle's, or written here on first use."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        b = bundle()
        if b is not None:
            return b / "cases" / name
        if name not in made:
            from device_cases import write_case
            made[name] = tmp_path_factory.mktemp("cases") / name
            write_case(made[name], name, STEPS)
        return made[name]
    return get


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("GPU tier figures (printed, never asserted)")
        for line in FIGURES:
            terminalreporter.write_line(line)
