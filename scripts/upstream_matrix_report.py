"""Before/after table: the save matrix with this project's torch_tensorrt series vs stock 2.14.0.

    .venv/bin/python scripts/upstream_matrix_report.py [--models a,b] [--json]

"stock" is torch-tensorrt 2.14.0 with only patch 0001 (ahead-of-time builds without a GPU)
applied — unpatched, `import torch_tensorrt` fails on a machine without a CUDA driver, so no
cell could run at all; both sides compile with `offload_module_to_cpu=True` (stock compile()
asks the device for free memory otherwise). The stock copy is made in a temp dir from the
installed (patched) package by reverse-applying the other patches; each side runs in its own
process. Every cell is judged against what eager execution writes (plan_mutations of the
exported model, and the engines' recorded aliasing), never against the series' own plan.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = ("kv_index_copy", "kv_write_only", "nested_three_deep", "ring_buffer",
                  "counter", "strided_write", "two_submodules")


def _stock_copy(dest: Path) -> Path:
    import torch_tensorrt
    pkg = Path(torch_tensorrt.__file__).parent
    shutil.copytree(pkg, dest / "torch_tensorrt", ignore=shutil.ignore_patterns("__pycache__"))
    series = (ROOT / "patches" / "torch_tensorrt" / ".patches").read_text().split()
    for name in reversed(series[1:]):
        subprocess.run(["git", "apply", "-R", "-p2",
                        str(ROOT / "patches" / "torch_tensorrt" / name)], cwd=dest, check=True)
    return dest


def _run_side(models, pythonpath=None):
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = f"{pythonpath}:{env.get('PYTHONPATH', '')}"
    out = subprocess.run([sys.executable, __file__, "--worker", ",".join(models)], env=env,
                         capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"worker failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def _judge(cell, ep_or_pte, truth_kv, truth_all, nbytes):
    """What is wrong with one saved artifact, in words ("ok" when nothing)."""
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from torch.export.graph_signature import OutputKind
    from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
    problems = []
    if cell.fmt == "executorch":
        info = inspect_pte(ep_or_pte).method("forward")
        buffers = {b.fqn: b for b in info.buffers}
        for fqn in sorted(truth_all):
            b = buffers.get(fqn)
            if b is None or b.kind == "read_only":
                problems.append(f"{fqn} never updated")
                continue
            # KV: never copied; copy-back of a (device) TensorRT delegate: host staging in +
            # ExecuTorch's write-back (tests/support/upstream_matrix.py says why)
            want = 0 if fqn in truth_kv else 2 * nbytes[fqn]
            if b.program_copy_bytes != want:
                problems.append(f"{fqn} copies {b.program_copy_bytes} B/step (want {want})")
            if not b.initial_value:
                problems.append(f"{fqn} uninitialised")
        return "; ".join(problems) or "ok"
    sig = ep_or_pte.graph_signature
    specs = [s for s in sig.output_specs if s.kind == OutputKind.BUFFER_MUTATION]
    targets = [s.target for s in specs]
    placeholder = {f: n for n, f in sig.inputs_to_buffers.items()}
    for fqn in sorted(truth_all):
        n = targets.count(fqn)
        if n == 0:
            problems.append(f"{fqn} undeclared")
        elif n > 1:
            problems.append(f"{fqn} declared {n}x")
        elif fqn in truth_kv and next(s for s in specs if s.target == fqn).arg.name != \
                placeholder.get(fqn):
            problems.append(f"{fqn} KV declared on a copy")
    stray = sorted(set(targets) - set(truth_all))
    if stray:
        problems.append(f"declares unwritten {stray}")
    return "; ".join(problems) or "ok"


def _worker(models):
    import copy
    import warnings
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    import torch
    import torch_tensorrt
    import torch_tensorrt_ext as tte
    from e2e_models import MODELS
    from rtx_env import engine_modules
    from upstream_matrix import CELLS
    results = {}
    for name in models:
        factory, args_of, _ = MODELS[name]
        model = factory().eval()
        args = args_of(0)
        ep = torch.export.export(copy.deepcopy(model), args)
        truth = tte.plan_mutations(ep)
        nbytes = {n: b.numel() * b.element_size() for n, b in model.named_buffers()}
        try:
            # offload_module_to_cpu: stock compile() otherwise asks the (absent) device for memory
            trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(args), min_block_size=1,
                                         offload_module_to_cpu=True)
        except Exception as e:  # noqa: BLE001 - the table reports it
            results[name] = {c.id: f"compile: {type(e).__name__}: {str(e)[:90]}" for c in CELLS}
            continue
        mods = engine_modules(trt)
        aliased = set()
        for call in trt.graph.nodes:
            if call.op == "call_module" and call.target in mods:
                m = mods[call.target]
                for _o, (i, _k) in (m.aliased_io or {}).items():
                    arg = call.args[list(m.input_binding_names).index(i)]
                    aliased.add(str(getattr(arg, "target", arg.name)).removeprefix("lifted_buf_"))
        truth_kv = {w.fqn for w in truth if w.fqn in aliased
                    or w.fqn.replace(".", "_") in aliased}
        row = {}
        for cell in CELLS:
            with tempfile.TemporaryDirectory() as d:
                path = Path(d) / "m"
                captured = []
                real = torch._inductor.aoti_compile_and_package
                torch._inductor.aoti_compile_and_package = lambda e, **kw: captured.append(e)
                try:
                    if cell.source == "ep":
                        src = torch_tensorrt.dynamo.export(trt, arg_inputs=list(args))
                        torch_tensorrt.save(src, str(path), output_format=cell.fmt)
                    else:
                        torch_tensorrt.save(trt, str(path), output_format=cell.fmt,
                                            arg_inputs=list(args), retrace=cell.retrace,
                                            use_legacy_exporter=cell.legacy)
                    art = (path.read_bytes() if cell.fmt == "executorch" else captured[0]
                           if cell.fmt == "aot_inductor" else torch.export.load(str(path)))
                    row[cell.id] = _judge(cell, art, truth_kv, set(truth.fqns), nbytes)
                except Exception as e:  # noqa: BLE001 - the table reports it
                    row[cell.id] = f"save: {type(e).__name__}: {str(e)[:90]}"
                finally:
                    torch._inductor.aoti_compile_and_package = real
        results[name] = row
    print(json.dumps(results))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default=",".join(DEFAULT_MODELS))
    p.add_argument("--json", action="store_true")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker is not None:
        _worker(a.worker.split(","))
        return 0
    models = a.models.split(",")
    ours = _run_side(models)
    with tempfile.TemporaryDirectory() as d:
        stock = _run_side(models, _stock_copy(Path(d)))
    if a.json:
        print(json.dumps({"stock": stock, "series": ours}, indent=1))
        return 0
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from upstream_matrix import CELLS
    print(f"{'cell':<42} {'stock ok':>8} {'series ok':>9}  stock problems (model: problem)")
    for c in CELLS:
        s_ok = sum(stock[m][c.id] == "ok" for m in models)
        o_ok = sum(ours[m][c.id] == "ok" for m in models)
        bad = [f"{m}: {stock[m][c.id]}" for m in models if stock[m][c.id] != "ok"]
        print(f"{c.id:<42} {s_ok:>4}/{len(models):<3} {o_ok:>5}/{len(models):<3}  "
              f"{' | '.join(bad)[:300]}")
        for m in models:
            if ours[m][c.id] != "ok":
                print(f"{'':<42}   series NOT ok: {m}: {ours[m][c.id]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
