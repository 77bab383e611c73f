#!/usr/bin/env bash
# CI: the package as a model author gets it. From a fresh clone of this repository's HEAD,
# `pip wheel .` (build isolation: the build compiles the C++ runtime); the wheel must be tagged
# cp311-cp311-linux_x86_64 and hold the runtime. Then, in a new venv, `pip install WHEEL` (patch
# apply must refuse, naming the extras [rtx] and [gpu]), `pip install WHEEL[rtx]`,
# `torch-tensorrt-ext patch apply`, `torch-tensorrt-ext demo`, importing the package's executorch
# module registers the delegate, and `patch revert` leaves every upstream file byte-identical to
# what pip installed (each file's sha256 in the distribution's RECORD).
# Prints each step's seconds and the wheel's size. Commits only: uncommitted changes are not in
# the clone. Env: TTE_WHEEL_CHECK=0 skips it (scripts/test.sh runs it; it takes minutes),
# TTE_WHEEL_CHECK_DIR keeps its work there (default: a temp dir, removed after).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
if [ "${TTE_WHEEL_CHECK:-1}" = 0 ]; then
  echo "wheel check: skipped (TTE_WHEEL_CHECK=0)"
  exit 0
fi
py=${PYTHON:-$(command -v python3.11 || command -v python3)}
# only what the new venv installs: no checkout on the path, no library override
unset PYTHONPATH VIRTUAL_ENV TTE_RUNTIME_LIB
if [ -n "${TTE_WHEEL_CHECK_DIR:-}" ]; then
  work=$TTE_WHEEL_CHECK_DIR
  rm -rf "$work" && mkdir -p "$work"
else
  work=$(mktemp -d /tmp/tte-wheel-check.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi
t0=$(date +%s)
step() { echo "wheel check: $1 ($(( $(date +%s) - t0 )) s)"; }

git clone -q --no-local "$root" "$work/src"
"$py" -m venv "$work/venv"
vpy="$work/venv/bin/python"
"$vpy" -m pip install -q --disable-pip-version-check --upgrade pip
step "fresh clone of $(git -C "$work/src" rev-parse --short HEAD) and a new venv"

(cd "$work/src" && "$vpy" -m pip wheel -q --disable-pip-version-check --no-deps -w "$work/dist" .)
wheels=("$work"/dist/*.whl)
wheel=${wheels[0]}
case "$(basename "$wheel")" in
  torch_tensorrt_ext-*-cp311-cp311-linux_x86_64.whl) ;;
  *) echo "wheel check: FAILED: $(basename "$wheel") is not tagged cp311-cp311-linux_x86_64" >&2
     exit 1 ;;
esac
step "built $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB"

cd "$work"  # nothing of the checkout on the path: the installed package only
"$vpy" -m pip install -q --disable-pip-version-check "$wheel"
# no TensorRT extra yet: patch apply refuses, naming the two extras
if "$work/venv/bin/torch-tensorrt-ext" patch apply 2> "$work/apply.err"; then
  echo "wheel check: FAILED: patch apply succeeded with no torch_tensorrt installed" >&2
  exit 1
fi
grep -q "pip install 'torch-tensorrt-ext\[rtx\]' (torch-tensorrt-rtx) or 'torch-tensorrt-ext\[gpu\]'" \
  "$work/apply.err" || { cat "$work/apply.err" >&2; echo "wheel check: FAILED: that message" \
  "names no extras" >&2; exit 1; }
step "installed it without a TensorRT extra: patch apply names [rtx] and [gpu]"
"$vpy" -m pip install -q --disable-pip-version-check "$wheel[rtx]"
step "installed it with its extra [rtx]"

"$work/venv/bin/torch-tensorrt-ext" patch apply
step "patch apply"
"$work/venv/bin/torch-tensorrt-ext" demo --quiet --json > "$work/demo.json"
"$vpy" - "$work/demo.json" <<'EOF'
import json, sys
out = json.load(open(sys.argv[1]))
assert out["ran"] and out["parity"] is True, out
print(f"wheel check: demo: {out['steps']} steps equal to eager ({out['engine']} engine)")
EOF
"$vpy" - <<'EOF'
import sysconfig
import torch_tensorrt_ext.executorch  # noqa: F401  (registers the delegate)
from executorch.runtime import Runtime
from torch_tensorrt_ext import runtime_lib
names = Runtime.get().backend_registry.registered_backend_names
lib = runtime_lib.library_path()
assert "TensorRTBackend" in names, names
assert str(lib).startswith(sysconfig.get_paths()["platlib"]), lib
print(f"wheel check: import registers TensorRTBackend from {lib}")
EOF
step "demo and the delegate"
"$work/venv/bin/torch-tensorrt-ext" patch revert
"$vpy" - <<'EOF'
import base64, csv, hashlib, sysconfig
from pathlib import Path
site = Path(sysconfig.get_paths()["purelib"])
checked = 0
for name in ("executorch", "torch_tensorrt_rtx"):
    (info,) = site.glob(f"{name}-*.dist-info")
    for row in csv.reader((info / "RECORD").open()):
        if len(row) < 2 or not row[1].startswith("sha256=") or "__pycache__" in row[0]:
            continue
        want = base64.urlsafe_b64decode(row[1][7:] + "==")
        got = hashlib.sha256((site / row[0]).read_bytes()).digest()
        assert got == want, f"{row[0]} differs from what pip installed after patch revert"
        checked += 1
print(f"wheel check: patch revert: {checked} upstream files byte-identical to their RECORD")
EOF
step "patch revert"
echo "wheel check: passed"
