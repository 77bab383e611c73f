#!/usr/bin/env bash
# Compile-check the TensorRT SDK adapter (runtime/src/nvinfer_api.cpp) against TensorRT's public
# headers, as TensorRT and as TensorRT-RTX (one source serves both), for every header set found in
# $TTE_TRT_HEADERS (default /tmp/tte-tensorrt-headers): one folder per version, each holding
# NVIDIA/TensorRT's include/ (e.g. 11.1/include, 10.14/include; fetched from github.com/NVIDIA/
# TensorRT at that tag — never into the repository). Where none are found (CI cannot fetch) it
# says so in one line and succeeds; a header set that does not compile fails it.
set -euo pipefail
cd "$(dirname "$0")/.."
headers=${TTE_TRT_HEADERS:-/tmp/tte-tensorrt-headers}
sets=()
for d in "$headers"/*/include; do
  [ -f "$d/NvInferRuntime.h" ] && sets+=("$d")
done
if [ "${#sets[@]}" = 0 ]; then
  echo "check_tensorrt_headers: skipped: no TensorRT headers in $headers (fetch NVIDIA/TensorRT's" \
    "include/ into $headers/<version>/include to run it; CI cannot fetch)"
  exit 0
fi
cuda=${CUDA_HOME:-/usr/local/cuda}
et=$(.venv/bin/python -c 'import executorch, os; print(os.path.realpath(list(executorch.__path__)[0]))')
status=0
for inc in "${sets[@]}"; do
  for sdk in tensorrt tensorrt_rtx; do
    flags=(-std=c++17 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-parameter
      -DTTE_HAVE_TENSORRT=1 -Iruntime/src -Iruntime/include -isystem "$inc"
      -isystem "$cuda/include" -I"$et/include"
      -I"$et/include/executorch/runtime/core/portable_type/c10" -DC10_USING_CUSTOM_GENERATED_MACROS)
    [ "$sdk" = tensorrt_rtx ] && flags+=(-DTTE_TENSORRT_SDK_RTX=1)
    if g++ "${flags[@]}" runtime/src/nvinfer_api.cpp; then
      echo "check_tensorrt_headers: $sdk adapter compiles against $inc"
    else
      echo "check_tensorrt_headers: $sdk adapter does not compile against $inc" >&2
      status=1
    fi
  done
done
exit $status
