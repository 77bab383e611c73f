#!/usr/bin/env python
"""Random stateful programs (tests/support/stateful_grammar.py) through export → compile → .pte,
each checked against eager step by step (tests/support/stateful_check.py) — or with `--methods`,
programs of several methods sharing state (method_grammar.py / method_check.py, every
multi-method save path, state compared after every call); prints how many were
tried, passed, refused by PyTorch itself (invalid) and failed at each stage, then, for each class of
failure, the smallest program hypothesis shrinks it to — as Python source — and what went wrong.
Exits 1 when any program failed.

    .venv/bin/python scripts/generate_stateful.py --count 300 --seed 0 --jobs 2

Programs are drawn by hypothesis in chunks (`--chunk` programs, hypothesis seed derived from
`--seed` and the chunk's index), each chunk in a worker subprocess that is replaced every
`--recycle` programs (memory stays flat over 10^4 programs) and whenever it dies: every result
goes to a journal as it is made, a program that killed its worker is recorded as a `crash`, and
the replacement replays the chunk from those results (hypothesis draws the same programs from the
same seed and results), so a chunk survives crashes. Shrinking is the same replay with the one
failure class made to raise. A chunk's programs depend only on `--seed`, the chunk's index and
`--chunk`, so `--first-chunk` continues a long run in a later invocation.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

RECYCLE_EXIT = 75      # the worker made --recycle programs: replace it
ENV_EXIT = 76          # torch_tensorrt is not usable right now (e.g. the series being re-applied)


def _records(path: Path):
    """The journal's records, stopping at a torn last one (a worker killed mid-write)."""
    if not path.exists():
        return
    with open(path, "rb") as f:
        while True:
            try:
                yield pickle.load(f)
            except (EOFError, pickle.UnpicklingError):
                return


# --- worker -------------------------------------------------------------------------------

def _worker(job_path: str) -> int:
    from hypothesis import HealthCheck, Phase, Verbosity, given, reject, seed, settings
    from hypothesis.errors import HypothesisException
    from stateful_check import check_program
    from stateful_grammar import programs
    from method_check import check_methods
    from method_grammar import methods_programs
    from torch_tensorrt_ext.upstream_api import UpstreamUnavailable
    if job_path_device := os.environ.get("TTE_STATEFUL_DEVICE"):
        from torch_tensorrt_ext import runtime_lib
        runtime_lib.use_device(job_path_device)
    from torch_tables import memoize_cia_table
    memoize_cia_table()       # torch's composite-op table kept per registry: a quarter faster
    from torch_annotations import lazy_py_impl_annotations
    lazy_py_impl_annotations()  # torch's py_impl, its closure's annotations postponed: a fifth
    from gc_threshold import raise_young_threshold
    raise_young_threshold()     # the collector's young generation every 10^4 allocations: a quarter
    with open(job_path, "rb") as f:
        job = pickle.load(f)
    cache, journal = job["cache"], open(job["journal"], "ab")
    fresh, seen, raised = [0], [], []

    def record(*rec):
        pickle.dump(rec, journal)
        journal.flush()
        os.fsync(journal.fileno())

    def result_of(program):
        if program not in cache:
            if fresh[0] >= job["recycle"]:
                journal.close()
                os._exit(RECYCLE_EXIT)          # a new process replays from the journal
            record("start", program)
            try:
                if job.get("methods"):
                    cache[program] = check_methods(program, device=job["device"])
                else:
                    cache[program] = check_program(program, steps=job["steps"],
                                                   device=job["device"],
                                                   rtx=job.get("rtx", False))
            except UpstreamUnavailable as e:       # the machine's fault, not the program's
                print(e, file=sys.stderr, flush=True)
                journal.close()
                os._exit(ENV_EXIT)
            record("result", program, cache[program])
            fresh[0] += 1
        return cache[program]

    phases = (Phase.generate, Phase.shrink) if job["target"] else (Phase.generate,)

    @seed(job["seed"])
    @settings(max_examples=job["count"], database=None, deadline=None, phases=phases,
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
              report_multiple_bugs=False)
    @given(methods_programs() if job.get("methods") else programs(kinds=job.get("kinds")))
    def run(program):
        seen.append(program)
        result = result_of(program)
        if result.invalid:
            reject()
        if job["target"] and result.signature() == job["target"]:
            raised.append(program)
            raise AssertionError(job["target"])

    try:
        run()
    except (AssertionError, HypothesisException):
        pass
    record("done", seen, raised[-1] if raised else None)
    journal.close()
    return 0


# --- parent -------------------------------------------------------------------------------

class Chunks:
    """Runs chunk jobs in worker subprocesses, relaunching them until each is done; every
    result any worker made is kept in `results` (shared, so replays cost nothing)."""

    def __init__(self, args, tmp: Path):
        self.args, self.tmp = args, tmp
        self.results = {}
        self.lock = threading.Lock()
        self.crashes = 0

    def run(self, index: int, seed: int, count: int, target=None):
        journal = self.tmp / f"chunk{index}-{'shrink' if target else 'gen'}.journal"
        log = self.tmp / f"chunk{index}.log"
        unavailable = 0
        while True:
            with self.lock:
                cache = dict(self.results)
            job = dict(seed=seed, count=count, target=target, cache=cache, steps=self.args.steps,
                       device=self.args.reference_device, recycle=self.args.recycle,
                       rtx=self.args.rtx, kinds=self.args.kinds, methods=self.args.methods,
                       journal=str(journal))
            job_path = self.tmp / f"chunk{index}.job"
            job_path.write_bytes(pickle.dumps(job))
            with open(log, "ab") as err:
                code = subprocess.run([sys.executable, __file__, "--worker", str(job_path)],
                                      stdout=err, stderr=err, env=self._env()).returncode
            done, started = self._read(journal)
            if done is not None and code == 0:
                return done
            if code == ENV_EXIT:
                unavailable += 1
                if unavailable > 5:
                    raise SystemExit(f"torch_tensorrt stayed unusable; see {log}")
                time.sleep(30)
            elif code != RECYCLE_EXIT and started is not None:
                self._crashed(started, code, log)
            elif code != RECYCLE_EXIT:
                raise SystemExit(f"worker for chunk {index} failed (exit {code}) before any "
                                 f"program; see {log}:\n{log.read_bytes()[-3000:].decode()}")

    def _env(self):
        env = dict(os.environ)
        if self.args.device:
            env["TTE_STATEFUL_DEVICE"] = self.args.device
        return env

    def _read(self, journal: Path):
        done, started = None, None
        for rec in _records(journal):
            if rec[0] == "start":
                started = rec[1]
            elif rec[0] == "result":
                with self.lock:
                    self.results[rec[1]] = rec[2]
                started = None
            elif rec[0] == "done":
                done = rec[1:]
        return done, started

    def _crashed(self, program, code: int, log: Path):
        from stateful_check import Result
        tail = log.read_bytes()[-1500:].decode("utf-8", "replace")
        why = f"signal {-code}" if code < 0 else f"exit {code}"
        with self.lock:
            self.results[program] = Result("crash", f"worker died ({why}); its log ends:\n{tail}",
                                           what=why)
            self.crashes += 1


def _chunks(args):
    left, index = args.count, args.first_chunk
    while left > 0:
        n = min(args.chunk, left)
        yield index, args.seed * 1_000_003 + index, n
        left, index = left - n, index + 1


def _summary(programs, results):
    """Counts by outcome (stateful_check.outcome), and each failing outcome by class."""
    from stateful_check import outcome, refusal_class
    counts = collections.Counter()
    for p in programs:
        r = results[p]
        kind = outcome(r)
        counts[kind] += 1
        if kind == "refused":
            counts[f"refused: {refusal_class(r)}"] += 1
        elif kind in ("mismatch", "error"):
            counts[f"{kind}: {r.stage}"] += 1
    return counts


def _print_summary(order, counts, seed) -> None:
    print(f"tried {len(order)} distinct programs (seed {seed}): passed {counts['passed']}, "
          f"mismatches {counts['mismatch']}, refusals of valid programs {counts['refused']}, "
          f"errors {counts['error']}, invalid (refused by PyTorch) {counts['invalid']}")
    for head in ("mismatch", "refused", "error"):
        for key in sorted(k for k in counts if k.startswith(head + ": ")):
            print(f"  {key}: {counts[key]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=100, help="programs to draw")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes at a time")
    ap.add_argument("--chunk", type=int, default=50, help="programs per hypothesis run")
    ap.add_argument("--first-chunk", type=int, default=0,
                    help="index of the first chunk: a long run split over several invocations "
                         "(--count 5000 --first-chunk 100 after --count 5000) draws exactly the "
                         "programs of one --count 10000 run")
    ap.add_argument("--recycle", type=int, default=40, help="programs per worker process")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--device", help="runtime device in force in the workers (e.g. emulated)")
    ap.add_argument("--reference-device", help="where reference delegates keep state (cuda:0)")
    ap.add_argument("--rtx", action="store_true",
                    help="also compile with TensorRT-RTX engines and save (the save verifies "
                         "every state write of the emitted program; the engines cannot run here)")
    ap.add_argument("--kinds", type=lambda text: frozenset(text.split(",")),
                    help="draw buffers of these kinds only (comma-separated names of "
                         "stateful_grammar.KINDS, e.g. cond,batch_norm); default: every kind")
    ap.add_argument("--methods", action="store_true",
                    help="draw programs of several methods sharing state (method_grammar: a "
                         "dynamic prefill, a decode, stateless and read-only methods, drawn "
                         "interleavings with reset, every multi-method save path) instead")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--out", help="folder for each failure class's shrunk program")
    ap.add_argument("--run-dir", help="keep the run's journals in this folder (default: a "
                    "temporary one, removed at the end) for scripts/stateful_journals.py")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args.worker)
    if args.run_dir:
        Path(args.run_dir).mkdir(parents=True, exist_ok=True)
        return _main(args, Path(args.run_dir))
    with tempfile.TemporaryDirectory(prefix="generate-stateful-") as tmp:
        return _main(args, Path(tmp))


def _main(args, tmp: Path) -> int:
    runner, order, first_chunk = Chunks(args, tmp), [], {}
    chunks = list(_chunks(args))
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(runner.run, *c): c for c in chunks}
        for k, future in enumerate(concurrent.futures.as_completed(futures)):
            seen = future.result()[0]
            for p in seen:
                first_chunk.setdefault(p, futures[future])
            failed = sum(1 for r in runner.results.values() if not r.ok and not r.invalid)
            print(f"[{k + 1}/{len(chunks)} chunks] {len(first_chunk)} programs so far, "
                  f"{failed} failed", file=sys.stderr, flush=True)
    for index, _seed, _n in chunks:     # in chunk order: the same report for the same seed
        order += [p for p, c in first_chunk.items() if c[0] == index]
    results = runner.results
    counts = _summary(order, results)
    _print_summary(order, counts, args.seed)
    classes = collections.OrderedDict()
    for p in order:
        r = results[p]
        if not r.ok and not r.invalid:
            classes.setdefault(r.signature(), []).append(p)
    print(f"{len(classes)} failure class(es)")
    _shrink_and_print(args, runner, classes, first_chunk)
    return 1 if classes else 0


def _shrink_and_print(args, runner, classes, first_chunk):
    from stateful_check import outcome, refusal_class

    def shrink(item):
        signature, progs = item
        if args.no_shrink or signature.startswith("crash"):
            return progs[0]
        index, seed, n = first_chunk[progs[0]]
        done = runner.run(f"{index}-{abs(hash(signature)):x}", seed, n, target=signature)
        return done[1] or progs[0]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        shrunk = list(pool.map(shrink, classes.items()))
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    for k, ((signature, progs), small) in enumerate(zip(classes.items(), shrunk, strict=False)):
        r = runner.results[small]
        label = refusal_class(r) if outcome(r) == "refused" else outcome(r)
        print(f"\n=== failure class {k + 1} [{label}]: {signature} ({len(progs)} program(s))")
        print(r.report(small))
        if out:
            header = "".join(f"# {line}\n" for line in r.report().splitlines())
            (out / f"failure_{k + 1}.py").write_text(header + "\n" + small.source())
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
