#!/usr/bin/env bash
# The device path on a real GPU (issue 22), run on the device machine over `.devrun/` (made here
# by scripts/device_bundle.py): builds the runtime with CUDA against the carried ExecuTorch C++
# SDK, runs its ctest suite, steps every case through `tte_run --device cuda` checking outputs
# and copied bytes (scripts/device_compare.py) on a caller's stream and on the default stream
# (byte-identical outputs), then reruns cases under compute-sanitizer (memcheck, racecheck,
# synccheck). Everything it prints is also in $OUT/device_run.log.
set -uo pipefail
root=$(pwd)
sdk="$root/.devrun/sdk"
b=/tmp/tte-build
log="${OUT:-/tmp}/device_run.log"
exec > >(tee "$log") 2>&1
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
nvcc --version | tail -1
cmake -S . -B "$b" -DCMAKE_PREFIX_PATH="$sdk/executorch;$sdk/nlohmann" \
  -DOPENSSL_INCLUDE_DIR="$sdk/openssl/include" \
  -DOPENSSL_CRYPTO_LIBRARY="$sdk/openssl/lib/libcrypto.so.3" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTTE_CUDA=ON -DTTE_PYTHON=/bin/true >/dev/null || exit 1
cmake --build "$b" -j 16 2>&1 | grep -E "error|warning|Built target tte_run" || true
[ -x "$b/runtime/tte_run" ] || { echo "build failed"; exit 1; }
mkdir -p "$b/runtime/tests/payloads" && cp -r .devrun/payloads/. "$b/runtime/tests/payloads/"
echo "== ctest"
ctest --test-dir "$b" --output-on-failure 2>&1 | tail -12
fails=0
echo "== tte_run --device cuda (every case)"
for d in .devrun/cases/*/; do
  steps=$(python3 -c "import json;print(json.load(open('$d/expect.json'))['steps'])")
  # on the caller's (non-blocking) stream first, then on the default stream: identical bytes
  if "$b/runtime/tte_run" "$d/m.pte" --io "$d" --steps "$steps" --device cuda --stream \
      > "$d/summary.json" 2> "$d/stderr.txt"; then
    python3 scripts/device_compare.py "$d" "$d/summary.json" || fails=$((fails + 1))
    mkdir -p "$d/stream" && mv "$d"/out.*.bin "$d/stream/"
  else
    echo "FAIL $(basename "$d") --stream: tte_run exit $?: $(grep -v '^I ' "$d/stderr.txt" | tail -3)"
    fails=$((fails + 1))
  fi
  if "$b/runtime/tte_run" "$d/m.pte" --io "$d" --steps "$steps" --device cuda --reset \
      > "$d/summary.json" 2> "$d/stderr.txt"; then
    python3 scripts/device_compare.py "$d" "$d/summary.json" || fails=$((fails + 1))
    for f in "$d"/stream/out.*.bin; do
      cmp -s "$f" "$d/$(basename "$f")" || { echo "FAIL $(basename "$d"): $(basename "$f") differs with --stream"; fails=$((fails + 1)); }
    done
  else
    echo "FAIL $(basename "$d"): tte_run exit $?: $(grep -v '^I ' "$d/stderr.txt" | tail -3)"
    fails=$((fails + 1))
  fi
done
echo "(each case ran on a caller's non-blocking stream, then on the default stream with a reset and a rerun; outputs compared byte for byte)"
echo "== without a device: refused"
"$b/runtime/tte_run" .devrun/cases/kv_index_copy/m.pte --io /tmp --steps 1 --device none 2>&1 \
  | grep -v '^I ' | tail -1
echo "== copy-back per decode step, every way (tte_bench_copy_back; issue 35)"
for shape in qwen3next demo; do
  echo "-- $shape"
  "$b/runtime/tte_bench_copy_back" "$shape" 200 || fails=$((fails + 1))
done
for tool in memcheck racecheck synccheck; do
  for c in demo_decoder gated_deltanet_states kv_index_copy returns_its_state prefill_dynamic \
      prefill_decode_shared; do
    d=.devrun/cases/$c
    echo "== compute-sanitizer --tool $tool: $c"
    compute-sanitizer --tool "$tool" --error-exitcode 9 "$b/runtime/tte_run" "$d/m.pte" \
      --io "$d" --steps 8 --device cuda --stream 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|========= [A-Z]" | tail -3
    echo "exit ${PIPESTATUS[0]}"
  done
done
echo "cases failed: $fails"
