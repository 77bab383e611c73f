#!/usr/bin/env bash
# Build the C++ delegate runtime (runtime/) into ./build: build/runtime/libtte_runtime.so and its
# ctest executables, against executorch's CMake package from the installed wheel. Each build of the
# library also installs it, its headers and its CMake package config (find_package(tte_runtime))
# into the Python package, src/torch_tensorrt_ext/_lib (gitignored), where runtime_lib.py finds it
# (a developer's editable install; `pip wheel .` / `pip install .` build the runtime themselves).
# Idempotent and incremental: configures once (again only when the inputs below change), then
# builds what changed. Env: JOBS (default 2), TENSORRT_ROOT (enables the TensorRT engine when
# TensorRT and CUDA are found), or TENSORRT_RTX_ROOT (a TensorRT-RTX SDK instead),
# CMAKE_BUILD_TYPE (default RelWithDebInfo).
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
pkg_prefix="$root/src/torch_tensorrt_ext/_lib"
want=$(printf '%s\n' "$et_root" "${TENSORRT_ROOT:-}" "${TENSORRT_RTX_ROOT:-}" \
  "${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  "$pkg_prefix" "$("$cmake" --version | head -1)" | sha256sum | cut -c1-16)
if [ ! -f build/CMakeCache.txt ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$cmake" -S . -B build "${gen[@]}" \
    -DCMAKE_PREFIX_PATH="$et_root" \
    -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
    -DTTE_PYTHON="$vpy" \
    -DTTE_PACKAGE_PREFIX="$pkg_prefix" \
    ${TENSORRT_ROOT:+-DTENSORRT_ROOT="$TENSORRT_ROOT"} \
    ${TENSORRT_RTX_ROOT:+-DTENSORRT_RTX_ROOT="$TENSORRT_RTX_ROOT"}
  echo "$want" > "$stamp"
fi
"$cmake" --build build -j "${JOBS:-2}"
# The build installs into the package after each link of the library; this covers a build that had
# nothing to relink (and prints nothing when the copy is current).
installed=$("$cmake" --install build --prefix "$pkg_prefix" --component tte_runtime)
printf '%s\n' "$installed" | grep -v -e '^-- Up-to-date' -e '^-- Install configuration' || true
# A header the runtime no longer ships as public (moved into runtime/src, or deleted) must not
# linger in the package's copy: a wheel would carry it.
for h in "$pkg_prefix"/include/tte/*.h; do
  [ -e "$h" ] && [ ! -f "runtime/include/tte/$(basename "$h")" ] && rm -f "$h"
done
exit 0
