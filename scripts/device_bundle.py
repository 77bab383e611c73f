"""Build `.devrun/` (gitignored): everything the GPU machine's run of the device path needs,
made on this CPU machine — that machine has CUDA, cmake and Python but no ExecuTorch and no
network (issue 22; `scripts/device_run.sh` runs there).

* `sdk/`: the C++ side of the installed executorch wheel (headers, shared libraries, CMake
  package; Python-version independent), nlohmann-json's headers + CMake package and OpenSSL's
  libcrypto (headers + library);
* `payloads/`: the runtime's ctest fixtures (runtime/tests/gen_payloads.py, run here);
* `cases/<name>/`: `.pte` files saved with reference engines and state on `cuda:0` — every
  end-to-end model (tests/support/e2e_models.py, which includes a Gated-DeltaNet-shaped one) and
  the demo decoder — with random initial buffer values, the inputs of STEPS calls, eager's outputs
  (`want.<step>.<j>.npy`) and `expect.json`: the bytes the delegate must copy per buffer over the
  run (KV 0; an engine-copied buffer its size per call).

Usage: .venv/bin/python scripts/device_bundle.py [STEPS]
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
OUT = ROOT / ".devrun"


def _sdk() -> None:
    import executorch
    et = Path(executorch.__path__[0])
    dst = OUT / "sdk" / "executorch"
    for sub in ("include", "lib", "share"):
        shutil.copytree(et / sub, dst / sub, dirs_exist_ok=True)
    nl = OUT / "sdk" / "nlohmann"
    shutil.copytree("/usr/include/nlohmann", nl / "include" / "nlohmann", dirs_exist_ok=True)
    shutil.copytree("/usr/share/cmake/nlohmann_json", nl / "share" / "cmake" / "nlohmann_json",
                    dirs_exist_ok=True)
    # OpenSSL's libcrypto (the blob digests): headers and the library the runtime links
    ssl = OUT / "sdk" / "openssl"
    shutil.copytree("/usr/include/openssl", ssl / "include" / "openssl", dirs_exist_ok=True)
    shutil.copytree("/usr/include/x86_64-linux-gnu/openssl", ssl / "include" / "openssl",
                    dirs_exist_ok=True)
    (ssl / "lib").mkdir(parents=True, exist_ok=True)
    shutil.copy2("/usr/lib/x86_64-linux-gnu/libcrypto.so.3", ssl / "lib" / "libcrypto.so.3")


def _payloads() -> None:
    subprocess.run([sys.executable, str(ROOT / "runtime" / "tests" / "gen_payloads.py"),
                    str(OUT / "payloads")], check=True, env={"PYTHONPATH": str(ROOT / "src"),
                                                              "PATH": "/usr/bin:/bin"})


def _cases(steps: int) -> None:
    from runtime_helpers import runner_cases, write_runner_case   # the suite's own cases
    for name in sorted(runner_cases()):
        write_runner_case(OUT / "cases" / name, name, steps)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    shutil.rmtree(OUT, ignore_errors=True)
    _sdk()
    _payloads()
    _cases(steps)
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"{OUT}: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
