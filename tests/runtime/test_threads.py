"""Programs in several Python threads, and long load/run/reset runs ("threads and long runs").

- N programs (two of them loaded from the same `.pte`, each its own inputs) loaded and stepped in
  N threads at once give, bit for bit, the outputs, final state and per-program state traffic of
  running them one after another: a program's state and its copy tally are its own.
- A refusal raised in one thread names that thread's program, whatever the other threads refuse
  meanwhile; a call that succeeds leaves no refusal on its thread.
- Load/run/reset cycles keep VmRSS flat: the growth over them stays under a bound that leaking one
  state tensor per cycle would exceed many times (the 10^4-cycle run and timings are in
  benchmarks/bench_threads.py; no test here looks at the clock).
"""
from __future__ import annotations

import copy
import gc
import threading

import pytest
import torch

import e2e_models as E
import runtime_helpers as H
import torch_tensorrt_ext as tte
from torch_tensorrt_ext import reference, runtime_lib
from torch_tensorrt_ext.demo.models import Decoder

STEPS = 12
ROUNDS = 3   # threaded rounds: more interleavings of the same work


def _decoder_args(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(1, 1, 16, generator=g), torch.tensor([step % 16])


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """(name, .pte path, args(step)) for N=4 programs: the demo decoder twice (one file, different
    inputs), and two e2e models whose state the runtime copies back."""
    d = tmp_path_factory.mktemp("threads")
    torch.manual_seed(3)
    dec = Decoder(layers=2).eval()
    for b in dec.buffers():
        if b.is_floating_point():
            b.normal_()
    dec_path = d / "decoder.pte"
    reference.export(copy.deepcopy(dec), _decoder_args(0), dec_path)
    out = [("decoder_a", dec_path, _decoder_args),
           ("decoder_b", dec_path, lambda s: _decoder_args(s + 40))]
    for name in ("gated_deltanet_states", "ema_and_counter"):
        factory, args_of, _ = E.MODELS[name]
        path = d / f"{name}.pte"
        reference.export(factory().eval(), args_of(0), path)
        out.append((name, path, args_of))
    return out


def _drive(path, args_of):
    """Load, STEPS calls: (outputs, final state, state traffic by path)."""
    prog = tte.executorch.load(path)
    outs = [prog.run(*args_of(s)) for s in range(STEPS)]
    return outs, prog.state(), prog.state_traffic_by_path()


def _in_threads(work):
    """Runs each of `work` (callables) in a thread of its own, started together; their results."""
    start, results, errors = threading.Barrier(len(work)), [None] * len(work), []

    def body(k):
        try:
            start.wait()
            results[k] = work[k]()
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _assert_same(got, want, name):
    (outs, state, traffic), (w_outs, w_state, w_traffic) = got, want
    for s, (o, w) in enumerate(zip(outs, w_outs, strict=False)):
        assert len(o) == len(w) and all(torch.equal(a, b) for a, b in zip(o, w, strict=False)), \
            f"{name}: output of step {s} differs from the sequential run's"
    assert sorted(state) == sorted(w_state)
    for fqn in w_state:
        assert torch.equal(state[fqn], w_state[fqn]), f"{name}: final {fqn} differs"
    assert traffic == w_traffic, f"{name}: state traffic differs"


def test_n_programs_in_n_threads_match_the_sequential_run_bit_for_bit(programs):
    sequential = [_drive(path, args_of) for _, path, args_of in programs]
    assert any(sum(sum(p.values()) for p in t.values()) for _, _, t in sequential), \
        "no program moved runtime-counted state: the traffic comparison would be vacuous"
    for _ in range(ROUNDS):
        threaded = _in_threads([lambda p=path, a=args_of: _drive(p, a)
                                for _, path, args_of in programs])
        for (name, _, _), got, want in zip(programs, threaded, sequential, strict=False):
            _assert_same(got, want, name)


def test_loaded_programs_stepped_in_threads_match_the_sequential_run(programs):
    """The same with the programs loaded first, in this thread, and only stepped in threads."""
    want = [_drive(path, args_of) for _, path, args_of in programs]
    progs = [tte.executorch.load(path) for _, path, _ in programs]

    def steps(prog, args_of):
        outs = [prog.run(*args_of(s)) for s in range(STEPS)]
        return outs, prog.state(), prog.state_traffic_by_path()

    got = _in_threads([lambda p=p, a=a: steps(p, a)
                       for p, (_, _, a) in zip(progs, programs, strict=True)])
    for (name, _, _), g, w in zip(programs, got, want, strict=True):
        _assert_same(g, w, name)


@pytest.fixture(scope="module")
def corrupt_ptes(tmp_path_factory):
    """Two `.pte` files whose one delegate's payload digest fails, of different blob sizes: the
    refusal of each names its own blob's size."""
    d = tmp_path_factory.mktemp("corrupt")
    out = []
    for hidden in (8, 16):
        spec = H.kv_step_spec(heads=2, s_max=6, hidden=hidden)
        args = {k: spec.inputs[k] for k in ("tok", "pos", "cache", "step")}
        pte = bytearray(H.delegated_pte(H.KvStepOuter(), args, spec))
        where = H.blob_in_pte(bytes(pte))
        pte[where.stop - 1] ^= 0x01   # the payload's last byte
        path = d / f"corrupt_{hidden}.pte"
        path.write_bytes(bytes(pte))
        out.append((path, f"(delegate of method 'forward': {where.stop - where.start}-byte blob)"))
    assert out[0][1] != out[1][1]
    return out


def test_a_refusal_in_one_thread_names_that_threads_program(corrupt_ptes, programs):
    tries = 40

    def refuse(path, names):
        for _ in range(tries):
            with pytest.raises(runtime_lib.DelegateRefusedError) as e:
                tte.executorch.load(path)
            msg = str(e.value)
            assert msg.endswith(names), f"another thread's refusal: {msg}"
            assert msg.endswith(": " + runtime_lib.last_refusal())
            assert runtime_lib.last_check() == "blob.engine_digest"
        return tries

    def run_clean():
        _, path, args_of = programs[0]
        prog = tte.executorch.load(path)
        for s in range(tries):
            prog.run(*args_of(s))
            assert (runtime_lib.last_refusal(), runtime_lib.last_check()) == ("", ""), \
                "a successful call left a refusal on its thread"
        return tries

    work = [lambda p=p, n=n: refuse(p, n) for p, n in corrupt_ptes] + [run_clean]
    assert _in_threads(work) == [tries] * 3


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_load_run_reset_cycles_keep_rss_flat(tmp_path):
    cycles = 1000
    torch.manual_seed(3)
    model = Decoder(layers=1, heads=2, s_max=512, head_dim=64).eval()
    args = model.example_args()
    path = reference.export(copy.deepcopy(model), args, tmp_path / "big_state.pte")
    largest = max(t.nbytes for t in tte.executorch.load(path).state().values())
    leak = cycles * largest   # one state tensor per cycle never freed: 256 KiB x 1000 = 250 MiB
    bound = leak // 16

    def cycle():
        prog = tte.executorch.load(path)
        prog.run(*args)
        prog.run(*args)
        prog.reset()

    for _ in range(50):   # warm-up: the allocators' pools, lazily built caches
        cycle()
    gc.collect()
    before = _rss_bytes()
    for _ in range(cycles):
        cycle()
    gc.collect()
    growth = _rss_bytes() - before
    assert growth < bound, (f"VmRSS grew {growth / 2**20:.1f} MiB over {cycles} cycles (bound "
                            f"{bound / 2**20:.1f} MiB; a leak of one {largest}-byte state "
                            f"tensor per cycle is {leak / 2**20:.0f} MiB)")
