#!/usr/bin/env bash
# libFuzzer + ASan/UBSan fuzzing of the delegate runtime (runtime/fuzz/README.md).
#   bash scripts/fuzz.sh build      install clang if missing, build build-fuzz/fuzz_{blob,init}
#   bash scripts/fuzz.sh smoke      build, then ~15 s per harness from the seed corpus (tests)
#   bash scripts/fuzz.sh campaign   build, then RUNS (default 10000000) inputs per harness, one
#                                   process each (JOBS harnesses at a time, default 1); logs and
#                                   crashes under build-fuzz/; a crash fails the command
#   bash scripts/fuzz.sh repro F    run one input (a crash artifact) through both harnesses
# HARNESSES="fuzz_init" limits any mode to the harnesses named.
# clang comes from Debian's packages (clang, libclang-rt-dev for libFuzzer), installed only here,
# only when fuzzing is asked for and only when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out="$root/build-fuzz"
vpy="$root/.venv/bin/python"
cmake="$root/.venv/bin/cmake"
[ -x "$cmake" ] || cmake=$(command -v cmake)
read -r -a harnesses <<< "${HARNESSES:-fuzz_blob fuzz_init}"  # HARNESSES picks some

need_clang() {
  local rt
  rt=$(clang++ -print-resource-dir 2>/dev/null || true)
  if command -v clang++ >/dev/null && ls "$rt"/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    return
  fi
  echo "fuzz.sh: installing clang and the libFuzzer runtime from Debian's packages"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  # Debian 12 names the libFuzzer runtime package after clang's major version.
  local major
  major=$(apt-cache show clang 2>/dev/null | sed -n 's/^Depends: .*clang-\([0-9]*\).*/\1/p' | head -1)
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq clang ${major:+libclang-rt-$major-dev}
}

build() {
  need_clang
  local et_root
  et_root=$("$vpy" -c 'import executorch, os; print(os.path.realpath(list(executorch.__path__)[0]))')
  if [ ! -f "$out/CMakeCache.txt" ]; then
    local gen=()
    [ -x "$root/.venv/bin/ninja" ] && gen=(-G Ninja -DCMAKE_MAKE_PROGRAM="$root/.venv/bin/ninja")
    CXX=clang++ "$cmake" -S runtime/fuzz -B "$out" "${gen[@]}" -DCMAKE_PREFIX_PATH="$et_root" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
  "$cmake" --build "$out" -j "${BUILD_JOBS:-2}"
  seeds
}

# Seed corpus: the ctest payload blobs (Python-written TR03 with real reference payloads, written
# again whenever their writers changed), the regression inputs and the upstream fixtures.
seeds() {
  local pay="$out/payloads" f stale=0
  for f in runtime/tests/gen_payloads.py tests/support/runtime_helpers.py \
           src/torch_tensorrt_ext/contracts/*.py; do
    [ "$f" -nt "$pay/kv_step.blob" ] && stale=1
  done
  if [ "$stale" = 1 ]; then
    PYTHONPATH="$root/src" "$vpy" runtime/tests/gen_payloads.py "$pay" >/dev/null
  fi
  for h in "${harnesses[@]}"; do
    mkdir -p "$out/seeds/$h" "$out/corpus/$h"
    cp -f "$pay"/*.blob runtime/fuzz/regressions/*.blob "$out/seeds/$h/"
    cp -f "$root"/tests/fixtures/*.blob "$out/seeds/$h/"
  done
}

flags=(-dict="$root/runtime/fuzz/blob.dict" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1)
export ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

fuzz() {  # harness, extra libFuzzer flags...
  local h=$1
  shift
  mkdir -p "$out/artifacts/$h"
  "$out/$h" "${flags[@]}" -artifact_prefix="$out/artifacts/$h/" "$@" \
    "$out/corpus/$h" "$out/seeds/$h"
}

case "${1:-}" in
  build) build ;;
  smoke)
    build
    for h in "${harnesses[@]}"; do
      fuzz "$h" -max_total_time="${SMOKE_SECONDS:-15}" 2>"$out/smoke_$h.log" ||
        { tail -40 "$out/smoke_$h.log"; echo "fuzz.sh: $h FOUND A CRASH (log: $out/smoke_$h.log)"; exit 1; }
      grep -E "^stat::number_of_executed_units" "$out/smoke_$h.log" | sed "s/^/$h /"
    done
    ;;
  campaign)
    build
    rc=0
    pids=()
    for h in "${harnesses[@]}"; do
      fuzz "$h" -runs="${RUNS:-10000000}" >"$out/campaign_$h.log" 2>&1 &
      pids+=($!)
      if [ "${#pids[@]}" -ge "${JOBS:-1}" ]; then wait "${pids[0]}" || rc=1; pids=("${pids[@]:1}"); fi
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    for h in "${harnesses[@]}"; do
      echo "$h: $(grep -E '^stat::number_of_executed_units' "$out/campaign_$h.log" || echo 'no final stats')"
    done
    [ "$rc" = 0 ] || echo "fuzz.sh: a harness FOUND A CRASH; artifacts under $out/artifacts/"
    exit "$rc"
    ;;
  repro)
    build >/dev/null
    for h in "${harnesses[@]}"; do "$out/$h" "${2:?input file}"; done
    ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
