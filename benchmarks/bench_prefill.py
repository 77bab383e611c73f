"""Prefill with a runtime prompt length, then decode, on the reference runtime:
figures only, never a test gate.

A transformers Llama (random init, nothing downloaded) exported as transformers documents for
ExecuTorch, as two methods of one `.pte` sharing their caches: `prefill` with a dynamic prompt
length (bounded at --max-prompt) and `decode` (one token). Prints, per prompt length, the
prefill call's time and the decode step's time (median of --repeat calls, after a warm-up),
and the state each method moves per call. Reference engines run ExecuTorch's CPU kernels, so the
figures are this runtime's overhead plus those kernels, not TensorRT's speed.

With --memory it also saves the two methods with their state on cuda:0 (a save needs no device)
and prints the state a load allocates: the caches both methods share, once (`saving/shared_arenas`),
against a copy of them per method (share_mutable_buffers=False).

With --profile it also times --calls decode steps under cProfile and prints how much of a step
is Python (argument checks, output wrapping) and how much the native call (the runtime and
ExecuTorch's kernels); `perf record -g` over this run attributes the native part.

Usage: python benchmarks/bench_prefill.py [--lengths 8 32 64] [--max-prompt 64] [--repeat 5]
                                          [--memory] [--profile [--calls 200]]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _median_ms(fn, repeat: int) -> float:
    fn()   # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def state_bytes(pte: bytes) -> tuple:
    """(bytes of state a load allocates, of which in device memory): each method's own copy of
    each buffer, except a buffer in an arena every method shares (`inspect_pte(...).shared`),
    counted once."""
    from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
    info = inspect_pte(pte)
    shared = {f for a in info.shared for f, _ in a.buffers}
    total = device = sum(a.nbytes for a in info.shared if a.device != "cpu")
    total += sum(a.nbytes for a in info.shared if a.device == "cpu")
    for m in info.methods:
        for b in m.buffers:
            if b.fqn not in shared:
                total += b.nbytes
                device += b.nbytes if b.device != "cpu" else 0
    return total, device


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[8, 32, 64])
    ap.add_argument("--max-prompt", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()

    import torch
    import transformers
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    import torch_tensorrt_ext as tte
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=704,
                                   num_hidden_layers=4, num_attention_heads=8,
                                   num_key_value_heads=2, head_dim=32,
                                   max_position_embeddings=256)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.generation_config.cache_implementation = "static"
    max_cache = args.max_prompt + 64
    ex = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=max_cache)
    t_dim = torch.export.Dim("T", min=1, max=args.max_prompt)
    ids = torch.randint(0, cfg.vocab_size, (1, 4))
    prefill = ex.export(input_ids=ids, cache_position=torch.arange(4),
                        dynamic_shapes={"input_ids": {1: t_dim}, "cache_position": {0: t_dim}},
                        strict=False)
    decode = ex.export(input_ids=ids[:, :1], cache_position=torch.tensor([0]))
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        path = tte.reference.export({"prefill": (prefill, None), "decode": (decode, None)},
                                    str(Path(d) / "llama.pte"), share_mutable_buffers=True)
        export_s = time.perf_counter() - t
        prog = tte.executorch.load(path, method="decode")
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        print(f"transformers Llama {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M "
              f"params ({weights / 2**20:.0f} MiB), cache {max_cache} positions, prompt up to "
              f"{args.max_prompt}: compile + save {export_s:.1f} s; reference runtime, median "
              f"of {args.repeat}")
        reset_ms = _median_ms(prog.reset, args.repeat)   # each prefill starts from a reset
        print(f"  reset (every buffer back to its initial value): {reset_ms:.2f} ms, not "
              "counted in the prefill times below")
        for n in args.lengths:
            prompt = torch.randint(0, cfg.vocab_size, (1, n))

            def run_prefill():
                prog.reset()
                prog.run(prompt, torch.arange(n), method="prefill")

            pre_ms = _median_ms(run_prefill, args.repeat)
            run_prefill()
            at = [n]

            def run_decode():
                prog.run(torch.randint(0, cfg.vocab_size, (1, 1)), torch.tensor([at[0]]))
                at[0] += 1

            dec_ms = _median_ms(run_decode, args.repeat)
            print(f"  prompt {n:>4}: prefill {pre_ms - reset_ms:7.2f} ms "
                  f"({(pre_ms - reset_ms) / n:.3f} ms/token) | decode step {dec_ms:6.2f} ms")
        traffic = prog.state_traffic()
        caches = sum(b for f, b in traffic.items() if "cumulative_length" not in f)
        print(f"  decode moves {caches} B of KV cache per step (aliased) and "
              f"{sum(traffic.values()) - caches} B of counters")
        if args.profile:
            import cProfile
            import pstats
            prof = cProfile.Profile()
            ids = torch.randint(0, cfg.vocab_size, (1, 1))
            positions = [args.lengths[-1] + k % 32 for k in range(args.calls)]
            prof.enable()
            t = time.perf_counter()
            for p in positions:
                prog.run(ids, torch.tensor([p]))
            step = (time.perf_counter() - t) / args.calls
            prof.disable()
            stats = pstats.Stats(prof).stats
            run = next(v for k, v in stats.items() if k[2] == "run" and "program.py" in k[0])
            own, below = run[2] / args.calls, (run[3] - run[2]) / args.calls
            print(f"  decode step under cProfile ({args.calls} calls): {step * 1e3:.2f} ms; "
                  f"Program.run's own frame (its native call into the runtime and ExecuTorch's "
                  f"kernels) {own * 1e3:.2f} ms, the Python it calls {below * 1e3:.3f} ms")
        if args.memory:
            from torch_tensorrt_ext.executorch.saving import lower
            programs = tte.reference.export_methods({"prefill": (prefill, None),
                                                     "decode": (decode, None)})
            for share in (True, False):
                data = bytes(lower.to_executorch(programs, device="cuda:0",
                                                 share_mutable_buffers=share).buffer)
                total, device = state_bytes(data)
                how = "one allocation per buffer" if share else "a copy per method"
                print(f"  state on cuda:0, {how}: a load allocates {total / 2**20:.3f} MiB of "
                      f"state ({device / 2**20:.3f} MiB of it in device memory)")


if __name__ == "__main__":
    main()
