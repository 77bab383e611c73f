"""The device path on a CUDA GPU, with or without TensorRT: every device case
(tests/support/device_cases.py — from a bundle made on a CPU machine, or built on the spot) is
stepped by the runner (`tte_run`) with its state in GPU memory, on a caller's non-blocking stream
and on the default stream (then reset and run again), and checked against eager and against the
same program's host run (the emulated device: ExecuTorch's same CPU kernels, state in host
memory); compute-sanitizer finds nothing over a chosen set of cases; the runtime's ctest suite
passes with the CUDA device built in; the copy-back benchmark's batched copy writes every byte.

Runs wherever CUDA is (`pytest -m gpu`; skipped as a whole elsewhere, tests/conftest.py), with
python3, pytest and the CUDA toolkit alone in bundle mode. Standard library only.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from device_outputs import (byte_mismatches, eager_mismatches, expectations, summary_mismatches,
                            summary_of)
from gpu_env import FIGURES, bundle, case_names, tool

pytestmark = pytest.mark.gpu

CASES = case_names()
# what compute-sanitizer runs over: KV, copy-back, a returned state, dynamic shapes, two methods
SANITIZED = ("demo_decoder", "gated_deltanet_states", "kv_index_copy", "returns_its_state",
             "prefill_dynamic", "prefill_decode_shared", "prefill_decode_encode", "whisper_shaped")
# and the first few programs drawn into the bundle (scripts/device_bundle.py --drawn)
SANITIZED += tuple([n for n in CASES if n.startswith("drawn_")][:4])
_CLEAN = re.compile(r"ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed "
                    r"\(0 errors, 0 warnings\)")


def _run_dir(case: Path, where: Path) -> Path:
    """A fresh folder for one run of the case: its program, inputs and methods linked in."""
    where.mkdir(parents=True)
    for f in case.iterdir():
        if f.name == "m.pte" or f.name.startswith(("in.", "method.")):
            (where / f.name).symlink_to(f.resolve())
    return where


def _step(tte_run: Path, case: Path, where: Path, *args: str, prefix=()) -> tuple[Path, str]:
    """`tte_run` over the case in a fresh folder: (that folder, its stdout + stderr)."""
    io = _run_dir(case, where)
    cmd = [*prefix, str(tte_run), str(io / "m.pte"), "--io", str(io), "--steps",
           str(expectations(case)["steps"]), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (f"{case.name}: {' '.join(cmd[-8:])} exited "
                                  f"{done.returncode}\n{done.stderr[-3000:]}")
    return io, (done.stdout + done.stderr if prefix else done.stdout)


@pytest.mark.parametrize("name", CASES)
def test_case_steps_on_cuda_like_eager_with_device_to_device_copies(name, case_dir, cuda_runtime,
                                                                    tmp_path):
    case = case_dir(name)
    host, out = _step(cuda_runtime.tte_run, case, tmp_path / "host", "--device", "emulated")
    host_summary = summary_of(out)
    stream, out = _step(cuda_runtime.tte_run, case, tmp_path / "stream", "--device", "cuda",
                        "--stream")
    on_stream = summary_of(out)
    default, out = _step(cuda_runtime.tte_run, case, tmp_path / "default", "--device", "cuda",
                         "--reset")
    on_default = summary_of(out)
    assert (on_stream["device"], on_stream["stream"]) == ("cuda:0", "caller")
    assert (on_default["device"], on_default["stream"]) == ("cuda:0", None)
    bad = []
    for run, summary, reset in ((host, host_summary, False), (stream, on_stream, False),
                                (default, on_default, True)):
        bad += eager_mismatches(case, run)[0] + summary_mismatches(case, summary, reset)
    # the GPU changes no byte of what the program computes: the host run's bytes, on either stream
    bad += byte_mismatches(case, host, stream) + byte_mismatches(case, stream, default)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("tool", ("memcheck", "racecheck", "synccheck"))
@pytest.mark.parametrize("name", [n for n in SANITIZED if n in CASES])
def test_compute_sanitizer_finds_nothing(name, tool, case_dir, cuda_runtime, tmp_path):
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    assert Path(sanitizer).exists(), "compute-sanitizer (CUDA toolkit) is not on PATH"
    _, out = _step(cuda_runtime.tte_run, case_dir(name), tmp_path / tool, "--device", "cuda",
                   "--stream", prefix=(sanitizer, "--tool", tool, "--error-exitcode", "9"))
    assert _CLEAN.search(out), out[-3000:]


def test_runtime_ctest_suite_passes_with_the_cuda_device(cuda_runtime):
    """ctest in the CUDA build: from a bundle, over the payloads made on the bundle's machine
    (its own generator needs the full Python stack)."""
    extra = ["-E", "runtime.gen_payloads", "-FS", "payloads"] if bundle() else []
    done = subprocess.run([tool("ctest"), "--test-dir", str(cuda_runtime.dir),
                           "--output-on-failure", *extra], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0 and "100% tests passed" in done.stdout, done.stdout[-4000:]


_WAYS = ("batched", "per_buffer", "flat", "upstream_pageable", "upstream_pinned")
_BYTES = {"qwen3next": 36 * (32 * 128 * 128 * 4 + 8192 * 3 * 4), "demo": 768 + 8}


@pytest.mark.parametrize("shape", sorted(_BYTES))
def test_copy_back_benchmark_batched_copy_writes_every_byte(shape, cuda_runtime,
                                                           record_testsuite_property):
    """tte_bench_copy_back: every way of one decode step's copy-back timed (printed at the end
    of the run, never asserted), and the batched copy checked to write every byte of every
    buffer."""
    done = subprocess.run([str(cuda_runtime.bench_copy_back), shape, "200"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("checked: the batched copy wrote every byte of every buffer"), \
        done.stdout
    ways = {}
    for line in lines[:-1]:
        way, *fields = line.split()
        ways[way] = dict(f.split("=") for f in fields)
    assert sorted(ways) == sorted(_WAYS)
    assert {w["bytes"] for w in ways.values()} == {str(_BYTES[shape])}
    for way, w in ways.items():
        record_testsuite_property(f"copy_back.{shape}.{way}.per_step_us", w["per_step_us"])
    timings = ", ".join(f"{way} {float(ways[way]['per_step_us']):.1f} us" for way in _WAYS)
    FIGURES.append(f"copy-back per decode step, {shape} ({ways['batched']['copies']} buffers, "
                   f"{_BYTES[shape]} B): {timings}")
