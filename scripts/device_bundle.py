"""Build `.devrun/` (gitignored): everything the GPU tier (tests/gpu, `scripts/test.sh --gpu`)
needs in bundle mode, made on this CPU machine — for a GPU machine that has CUDA, cmake and
python3 but no ExecuTorch, no torch_tensorrt_ext and no network (run there with
`TTE_DEVICE_BUNDLE=.devrun bash scripts/test.sh --gpu`, or `scripts/device_run.sh`).

* `sdk/`: the C++ side of the installed executorch wheel (headers, shared libraries, CMake
  package; Python-version independent), nlohmann-json's headers + CMake package and OpenSSL's
  libcrypto (headers + library);
* `payloads/`: the runtime's ctest fixtures (runtime/tests/gen_payloads.py, run here);
* `cases/<name>/`: every case of tests/support/device_cases.py's `DEVICE_CASES` as a case folder
  (`device_cases.write_case`: the `.pte` saved with reference engines and state on `cuda:0`, the
  inputs and method of STEPS calls, eager's outputs, `expect.json`) — and with `--drawn N`, N
  programs of several methods drawn by tests/support/method_grammar.py from `--drawn-seed`
  (`drawn_device_cases`: `cases/drawn_<seed>_<k>/`; a program that cannot be written is named
  and counted, and the bundle is still made; each written one is stepped here on the emulated
  device first, with the GPU tier's checks, and its mismatches printed);
* `wheels/`: pytest and what it needs, for the GPU machine's Python (3.12; pure-Python wheels,
  the versions installed here), installed there by `scripts/test.sh --gpu`.

Usage: .venv/bin/python scripts/device_bundle.py [STEPS] [--drawn N] [--drawn-seed S]
"""
from __future__ import annotations

import argparse
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
    from device_cases import DEVICE_CASES, write_case   # the suite's own cases
    for name in sorted(DEVICE_CASES):
        write_case(OUT / "cases" / name, name, steps)


def _drawn(steps: int, count: int, draw_seed: int) -> None:
    from device_cases import DEVICE_CASES, write_case
    from drawn_device_cases import drawn_device_cases
    drawn, failed = drawn_device_cases(draw_seed, count), []
    for name, case in drawn.items():
        DEVICE_CASES[name] = case
        try:
            write_case(OUT / "cases" / name, name, steps)
        except Exception as e:  # noqa: BLE001 - named and counted: the host generator's finding
            shutil.rmtree(OUT / "cases" / name, ignore_errors=True)
            failed.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    print(f"drawn cases (seed {draw_seed}): {len(drawn)} distinct, {len(drawn) - len(failed)} "
          f"written, {len(failed)} not")
    for line in failed:
        print("  " + line)
    _check_emulated(sorted(n for n in drawn if (OUT / "cases" / n / "m.pte").is_file()))


def _check_emulated(names: list[str]) -> None:
    """Each written drawn case stepped here by the runner on the emulated device (state in memory
    that faults on host access), with the GPU tier's checks: outputs against eager, copy bytes
    against the blobs, device to device, reset + rerun identical."""
    import tempfile
    from device_outputs import expectations
    from runtime_helpers import runner_mismatches
    bad = []
    for name in names:
        case = OUT / "cases" / name
        with tempfile.TemporaryDirectory() as tmp:
            for f in case.iterdir():
                (Path(tmp) / f.name).symlink_to(f.resolve())
            bad += runner_mismatches(case, tmp, expectations(case)["steps"])[0]
    print(f"drawn cases on the emulated device here: {len(names)} stepped, {len(bad)} mismatches")
    for line in bad:
        print("  " + line)


PYTEST_WHEELS = ("pytest", "pluggy", "iniconfig", "packaging", "pygments")


def _wheels() -> None:
    """pytest's wheels at the versions installed here (all pure Python: any Python 3 takes them)."""
    from importlib.metadata import version
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary=:all:", "-d", str(OUT / "wheels"),
                    *(f"{n}=={version(n)}" for n in PYTEST_WHEELS)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("steps", nargs="?", type=int, default=8)
    parser.add_argument("--drawn", type=int, default=0, help="drawn programs of several methods")
    parser.add_argument("--drawn-seed", type=int, default=0)
    args = parser.parse_args()
    shutil.rmtree(OUT, ignore_errors=True)
    _sdk()
    _payloads()
    _cases(args.steps)
    if args.drawn:
        _drawn(args.steps, args.drawn, args.drawn_seed)
    _wheels()
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"{OUT}: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
