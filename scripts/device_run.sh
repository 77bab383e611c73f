#!/usr/bin/env bash
# The GPU tier on the project's GPU machine (CUDA, cmake, python3; no ExecuTorch, no network):
# `scripts/test.sh --gpu` over the bundle `.devrun/` (made here by scripts/device_bundle.py and
# carried there), after naming the card. The log and the JUnit XML go to $OUT (else /tmp).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
{
  nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
  TTE_DEVICE_BUNDLE=${TTE_DEVICE_BUNDLE:-.devrun} TTE_JUNIT_XML="$out/gpu-tier.xml" \
    bash scripts/test.sh --gpu "$@"
} 2>&1 | tee "$out/device_run.log"
exit "${PIPESTATUS[0]}"
