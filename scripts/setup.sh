#!/usr/bin/env bash
# Set up ./.venv on a fresh CPU machine (Python 3.11): the pinned stack, this package (editable),
# the patch series applied to the installed upstream packages, and the C++ runtime built.
# Idempotent: a second run only redoes the steps whose inputs changed.
#
# --gpu (a GPU runner): then also the `gpu` extra — torch-tensorrt and TensorRT 11.1 from NVIDIA's
# package index, in place of torch-tensorrt-rtx (both install the same torch_tensorrt package) —
# and the runtime built with TensorRT from TENSORRT_ROOT (a TensorRT SDK: include/ and lib/; the
# pip wheels ship no headers). It checks first that NVIDIA's index is reachable and that
# TENSORRT_ROOT holds an SDK, and stops with one line saying which is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
gpu=0
[ "${1:-}" = "--gpu" ] && gpu=1
nvidia_index=${TTE_NVIDIA_INDEX:-https://pypi.nvidia.com}
if [ "$gpu" = 1 ]; then
  if ! curl -sSf --max-time 10 -o /dev/null "$nvidia_index/" 2>/dev/null; then
    echo "setup.sh --gpu: $nvidia_index (TensorRT's libraries) is not reachable from this machine;" \
      "run it on a GPU runner with access to NVIDIA's package index" >&2
    exit 2
  fi
  if [ ! -f "${TENSORRT_ROOT:-/nonexistent}/include/NvInfer.h" ]; then
    echo "setup.sh --gpu: TENSORRT_ROOT='${TENSORRT_ROOT:-}' holds no TensorRT SDK" \
      "(include/NvInfer.h); point it at the TensorRT 11.1 tarball's folder (the pip wheels ship" \
      "no headers)" >&2
    exit 2
  fi
fi
py=${PYTHON:-$(command -v python3.11 || command -v python3)}
# After an editable install: scikit-build-core's .pth also imports a finder of its own (it would
# rebuild CMake on import; this install runs none) that resolves torch_tensorrt_ext from this src/
# even where PYTHONPATH names another (a worktree's src/, a wheel's --target dir: test_packaging's
# probe). Keep the .pth's path line only: a plain sys.path entry, behind PYTHONPATH.
plain_editable() {
  local site
  site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  sed -i '/^import _editable_skbc_/d' "$site/_editable_skbc_torch_tensorrt_ext.pth"
}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
vpy="$root/.venv/bin/python"
"$vpy" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"Python 3.11 needed, found {sys.version}"'

stamp=.venv/.tte-deps
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$vpy" -m pip install -q --upgrade pip
  # torch 2.14.1 is the pin torch-tensorrt 2.14.0 needs; executorch 1.5.1 is the release we patch.
  # torch-tensorrt-rtx 2.14.0 has torch-tensorrt 2.14.0's Python files byte for byte and a real
  # TensorRT-RTX builder that runs without a GPU: upstream's converters and ahead-of-time engine
  # builds run here (GPU runners install torch-tensorrt + TensorRT instead: extra `gpu`).
  # The two distributions install the same torch_tensorrt package: never both.
  if "$vpy" -m pip show -q torch-tensorrt >/dev/null 2>&1; then
    "$vpy" -m pip uninstall -y -q torch-tensorrt
  fi
  "$vpy" -m pip install -q torch==2.14.1 executorch==1.5.1 torch-tensorrt-rtx==2.14.0 \
    "transformers>=5.23,<6" pytest pytest-xdist hypothesis "cmake>=3.28" ninja ruff \
    "scikit-build-core>=1.1,<2"
  # Editable, from this venv (--no-build-isolation: the build backend scikit-build-core is
  # installed above): src/ on the path and no CMake (pyproject's editable override); the runtime
  # is built below, incrementally, into src/torch_tensorrt_ext/_lib.
  "$vpy" -m pip install -q --no-deps --no-build-isolation -e .
  plain_editable
  echo "$want" > "$stamp"
fi

# Upstream's own formatters and linters (`patch check` runs them): each target's pinned tools
# (the pyproject dependency groups hooks-*) in an environment of their own,
# .venv/tte-hooks/<group>.
for extra in hooks-torch-tensorrt hooks-executorch; do
  env=.venv/tte-hooks/$extra
  pins=$("$vpy" -c 'import sys, tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["dependency-groups"][sys.argv[1]]))' "$extra")
  if [ "$(cat "$env/.tte-pins" 2>/dev/null)" != "$pins" ]; then
    rm -rf "$env"
    "$vpy" -m venv "$env"
    # shellcheck disable=SC2086
    "$env/bin/python" -m pip install -q $pins
    echo "$pins" > "$env/.tte-pins"
  fi
done

if [ "$gpu" = 1 ]; then
  # the GPU stack in place of the CPU one: torch-tensorrt (same Python files) + TensorRT 11.1
  "$vpy" -m pip uninstall -y -q torch-tensorrt-rtx tensorrt-rtx 2>/dev/null || true
  "$vpy" -m pip install -q --extra-index-url "$nvidia_index" --no-build-isolation -e ".[gpu]"
  plain_editable
fi

if [ -f patches/upstream.toml ] && "$vpy" -c 'import torch_tensorrt_ext.patching' 2>/dev/null; then
  .venv/bin/torch-tensorrt-ext patch apply
  .venv/bin/torch-tensorrt-ext patch status
fi

# nlohmann/json (Debian's nlohmann-json3-dev, CMake package nlohmann_json) is the runtime's blob
# metadata JSON reader: the runtime's CMake configure fails without it.
# OpenSSL's libcrypto (Debian's libssl-dev) computes its blob digests' SHA-256.
for pkg in nlohmann-json3-dev libssl-dev; do
  if [ -f runtime/CMakeLists.txt ] && ! dpkg -s "$pkg" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
      { apt-get update -qq && apt-get install -y -qq "$pkg"; } ||
        echo "setup: installing $pkg failed; the C++ runtime will not configure" >&2
    else
      echo "setup: $pkg is missing and only root can install it: run" \
        "'apt-get install -y $pkg' as root (the C++ runtime needs it)" >&2
    fi
  fi
done

if [ -f runtime/CMakeLists.txt ]; then
  bash scripts/build_runtime.sh
fi

# clang-format (Debian's) checks the runtime's C++ style (.clang-format) in scripts/test.sh; without
# it that check fails, so say so here instead of failing the setup.
if ! command -v clang-format >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    { apt-get update -qq && apt-get install -y -qq clang-format; } ||
      echo "setup: installing clang-format failed; scripts/test.sh's C++ style check will fail" >&2
  else
    echo "setup: clang-format is missing and only root can install it: run" \
      "'apt-get install -y clang-format' as root (scripts/test.sh's C++ style check needs it)" >&2
  fi
fi
