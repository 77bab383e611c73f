"""The metadata ExecuTorch's LLM runner reads from a `.pte` (`TextLLMRunner`, `llama_main`): the
constant methods `get_max_seq_len`, `get_max_context_len`, `use_kv_cache`,
`enable_dynamic_shape`, `get_vocab_size`, `get_bos_id`, `get_eos_ids`, passed to
`torch_tensorrt.save(..., output_format="executorch", constant_methods=...)`.

Invariant: `runner_metadata(config)` returns those methods for an ExecuTorch `ModelArgs` or a
transformers `PretrainedConfig`, every value of the type the runner reads (ints, bools, a list of
ints); `check_runner_metadata(methods)` returns only when a mapping that names any runner method
names `get_max_seq_len` and gives each runner method a value of that type, else raises
`UsageError` naming the method and what it needs — at save, before anything is written. This
module imports nothing heavy and loads no library.
"""
from __future__ import annotations

from typing import Any
from collections.abc import Mapping, Sequence

from ..errors import UsageError

__all__ = ["RUNNER_METHODS", "check_runner_metadata", "runner_metadata"]

# method -> (the type the runner reads, what it means)
RUNNER_METHODS = {
    "get_max_seq_len": (int, "the longest sequence one call may take"),
    "get_max_context_len": (int, "the KV cache's length"),
    "use_kv_cache": (bool, "whether the model keeps a KV cache"),
    "enable_dynamic_shape": (bool, "whether a call takes several tokens (prefill in one call)"),
    "get_vocab_size": (int, "the logits' size"),
    "get_bos_id": (int, "the tokenizer's begin-of-sequence id"),
    "get_eos_ids": (list, "the tokenizer's end-of-sequence ids"),
}


def runner_metadata(config: Any, bos_id: int | None = None,
                    eos_ids: Sequence[int] | None = None) -> dict[str, Any]:
    """The runner's constant methods for `config` (ExecuTorch's `ModelArgs`, or a transformers
    config with a static cache of `max_position_embeddings`); `bos_id`/`eos_ids` override the
    config's token ids (ModelArgs has none)."""
    if hasattr(config, "max_seq_len"):          # executorch.examples.models.llama ModelArgs
        seq, ctx = config.max_seq_len, getattr(config, "max_context_len", config.max_seq_len)
        kv, dynamic = config.use_kv_cache, config.enable_dynamic_shape
    else:                                       # transformers PretrainedConfig
        seq = ctx = config.max_position_embeddings
        kv, dynamic = True, False
    bos = bos_id if bos_id is not None else getattr(config, "bos_token_id", None)
    eos = eos_ids if eos_ids is not None else getattr(config, "eos_token_id", None)
    out = {"get_max_seq_len": int(seq), "get_max_context_len": int(ctx),
           "use_kv_cache": bool(kv), "enable_dynamic_shape": bool(dynamic),
           "get_vocab_size": int(config.vocab_size)}
    if bos is not None:
        out["get_bos_id"] = int(bos)
    if eos is not None:
        out["get_eos_ids"] = [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]
    check_runner_metadata(out)
    return out


def _wrong(name: str, value: Any) -> str:
    want, meaning = RUNNER_METHODS[name]
    if want is list:
        ok = isinstance(value, (list, tuple)) and value and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value)
        return "" if ok else "a non-empty list of ints"
    if want is bool:
        return "" if isinstance(value, bool) else "a bool"
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0 or \
        name == "get_bos_id" and isinstance(value, int) and value >= 0
    return "" if ok else "a positive int"


def check_runner_metadata(methods: Mapping[str, Any]) -> None:
    named = [m for m in methods if m in RUNNER_METHODS]
    if not named:
        return
    if "get_max_seq_len" not in methods:
        raise UsageError(
            f"constant_methods names ExecuTorch's LLM runner's {sorted(named)} but not "
            "'get_max_seq_len', which the runner needs to load the program; pass "
            "constant_methods=torch_tensorrt_ext.executorch.runner_metadata(config)")
    for name in named:
        if why := _wrong(name, methods[name]):
            raise UsageError(
                f"constant_methods[{name!r}] is {methods[name]!r}; ExecuTorch's LLM runner reads "
                f"it as {RUNNER_METHODS[name][1]}: give {why}")
