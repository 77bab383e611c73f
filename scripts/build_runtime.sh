#!/usr/bin/env bash
# Build the C++ delegate runtime (runtime/) into ./build: build/runtime/libtte_runtime.so and its
# ctest executables, against executorch's CMake package from the installed wheel.
# Idempotent and incremental: configures once (again only when the inputs below change), then
# builds what changed. Env: JOBS (default 2), TENSORRT_ROOT (enables the TensorRT engine when
# TensorRT and CUDA are found), CMAKE_BUILD_TYPE (default RelWithDebInfo).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
vpy="$root/.venv/bin/python"
cmake="$root/.venv/bin/cmake"
[ -x "$cmake" ] || cmake=$(command -v cmake)
et_root=$("$vpy" -c 'import executorch, os; print(os.path.realpath(list(executorch.__path__)[0]))')
gen=()
if [ ! -f build/CMakeCache.txt ]; then
  if [ -x "$root/.venv/bin/ninja" ] || command -v ninja >/dev/null; then
    gen=(-G Ninja)
    [ -x "$root/.venv/bin/ninja" ] && gen+=(-DCMAKE_MAKE_PROGRAM="$root/.venv/bin/ninja")
  fi
fi
stamp=build/.tte-configure
want=$(printf '%s\n' "$et_root" "${TENSORRT_ROOT:-}" "${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  "$("$cmake" --version | head -1)" | sha256sum | cut -c1-16)
if [ ! -f build/CMakeCache.txt ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$cmake" -S . -B build "${gen[@]}" \
    -DCMAKE_PREFIX_PATH="$et_root" \
    -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
    -DTTE_PYTHON="$vpy" \
    ${TENSORRT_ROOT:+-DTENSORRT_ROOT="$TENSORRT_ROOT"}
  echo "$want" > "$stamp"
fi
"$cmake" --build build -j "${JOBS:-2}"
