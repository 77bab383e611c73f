#!/usr/bin/env bash
# The README's test command: make sure ./.venv is set up (idempotent), then run the Python tests
# and the C++ runtime's ctest suite. Exit status is non-zero if any suite fails.
#
# --gpu (a GPU runner): the GPU tier, tests/gpu (`pytest -m gpu`), JUnit XML written to
# $TTE_JUNIT_XML (default build/gpu-tier.xml); extra arguments go to pytest. It needs a CUDA device,
# the CUDA toolkit (nvcc, compute-sanitizer) and cmake >= 3.28, and takes its cases either
#  * from a bundle (TTE_DEVICE_BUNDLE=DIR, made by scripts/device_bundle.py on any machine with the
#    full stack): then python3 alone, with the bundle's pytest wheels — no network, no ExecuTorch;
#  * or built on the spot: the full stack set up here (scripts/setup.sh) and, where NVIDIA's index
#    and a TensorRT SDK are there, TensorRT (setup.sh --gpu; where not, it says why in one line and
#    the TensorRT tests skip naming what is missing; everything else runs).
if [ "${1:-}" = "--gpu" ]; then
  shift
  junit=${TTE_JUNIT_XML:-build/gpu-tier.xml}
  mkdir -p "$(dirname "$junit")"
  if [ -n "${TTE_DEVICE_BUNDLE:-}" ]; then
    site=$(mktemp -d)
    for w in "$TTE_DEVICE_BUNDLE"/wheels/*.whl; do python3 -m zipfile -e "$w" "$site"; done
    PYTHONPATH="$site" exec python3 -m pytest -p no:cacheprovider -m gpu tests/gpu \
      --junitxml="$junit" "$@"
  fi
  bash scripts/setup.sh
  bash scripts/setup.sh --gpu || echo "test.sh --gpu: no TensorRT (above): its tests skip" >&2
  exec .venv/bin/python -m pytest -p no:cacheprovider -m gpu tests/gpu --junitxml="$junit" "$@"
fi
bash scripts/setup.sh
status=0
# CI: the patch series must apply to the pinned pristine upstream files, and upstream's own
# formatters and linters (patches/hooks.toml, at upstream's pins) must find nothing the series
# introduces on the files it touches (writes nothing; ~1 min).
if [ -f patches/upstream.toml ]; then
  .venv/bin/torch-tensorrt-ext patch check || status=$?
fi
# House rules: ruff (pyproject.toml [tool.ruff]) and the runtime's C++ style (.clang-format); a
# missing clang-format fails the check too.
.venv/bin/ruff check src tests benchmarks scripts || status=$?
find runtime/src runtime/include runtime/tests runtime/fuzz runtime/bench runtime/tools \
  \( -name '*.cpp' -o -name '*.h' \) -print0 | xargs -0 clang-format --dry-run --Werror || status=$?
# The TensorRT SDK adapter against TensorRT's public headers, where they were fetched (one line
# saying it was skipped where not: CI cannot fetch).
bash scripts/check_tensorrt_headers.sh || status=$?
# Two workers (CI has two cores), a test file per worker at a time (`--dist loadfile`: a
# module's fixtures are made once); TTE_PYTEST_WORKERS=0 runs in this process. The 20 slowest
# tests are printed: what to shard when the run nears CI's 45 minutes.
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${TTE_PYTEST_WORKERS:-2}" --dist loadfile \
  --durations=20 "$@" || status=$?
# Upstream's own tests for this area, baseline vs patched (with the series' changes to upstream's
# tests): no test that passes on the baseline may fail patched. TTE_PEER=0 skips (~5 min).
[ "${TTE_PEER:-1}" = 0 ] || [ "$#" -gt 0 ] || .venv/bin/python scripts/upstream_peer.py || status=$?
if [ -f build/runtime/CTestTestfile.cmake ] || [ -f build/CTestTestfile.cmake ]; then
  (cd build && ../.venv/bin/ctest --output-on-failure) || status=$?
fi
# Fuzz smoke of the delegate runtime (~15 s per harness; installs clang once; TTE_FUZZ=0 skips).
[ "${TTE_FUZZ:-1}" = 0 ] || bash scripts/fuzz.sh smoke || status=$?
# The package as a model author gets it: a wheel built from a fresh clone of HEAD, installed into
# a new venv with its extra [rtx]; patch apply, demo, the delegate, patch revert byte for byte
# (scripts/wheel_check.sh; minutes: TTE_WHEEL_CHECK=0 skips).
[ "$#" -gt 0 ] || bash scripts/wheel_check.sh || status=$?
exit $status
