"""ExecuTorch's own LLM runner over a `.pte` of this project, out of the box.

Importing this module loads this project's runtime library (`runtime_lib.load()`), so ExecuTorch's
runner in this process resolves the `TensorRTBackend` delegate; a missing library is a
`RuntimeLibraryError` here, naming it — not a bare "Generation failed" with the reason on stderr.

Invariant: `text_runner(pte, tokenizer)` returns ExecuTorch's `TextLLMRunner` only for a `.pte`
that carries the runner's metadata (`contracts.llm_metadata.RUNNER_METHODS`, at least
`get_max_seq_len`) and whose delegates' backends are all registered in this process; otherwise it
raises `UsageError` naming what is missing and how to save it, and opens nothing.
"""
from __future__ import annotations

from pathlib import Path

from ... import runtime_lib
from ...errors import UsageError
from ...contracts.llm_metadata import RUNNER_METHODS, check_runner_metadata, runner_metadata

__all__ = ["check_runner_metadata", "runner_metadata", "text_runner"]

runtime_lib.load()


def _methods_and_backends(data: bytes):
    from ..inspecting.traffic import flatbuffer_program
    program = flatbuffer_program(data)
    return ({p.name for p in program.execution_plan},
            {d.id for p in program.execution_plan for d in p.delegates})


def text_runner(pte: str | Path, tokenizer: str | Path, data_path: str | Path | None = None):
    """ExecuTorch's `TextLLMRunner` over `pte` with `tokenizer` (a tokenizer.json / .model) and
    `data_path`, the `.ptd` its engines' weights were saved to (`save_data_externally`)."""
    from executorch.extension.llm.runner import TextLLMRunner
    from executorch.runtime import Runtime
    methods, backends = _methods_and_backends(Path(pte).read_bytes())
    missing = sorted(m for m in ("get_max_seq_len",) if m not in methods)
    if missing:
        raise UsageError(
            f"{pte} has no method {missing[0]!r}: ExecuTorch's LLM runner reads its metadata "
            f"({', '.join(RUNNER_METHODS)}) from constant methods. Save it with "
            "torch_tensorrt.save(..., output_format='executorch', constant_methods="
            "torch_tensorrt_ext.executorch.runner_metadata(model_args_or_config))")
    unknown = sorted(b for b in backends if not Runtime.get().backend_registry.is_available(b))
    if unknown:
        raise UsageError(f"{pte} is delegated to {unknown}, which no library in this process "
                         "registers: load the backend's runtime before running it")
    if data_path is not None and not Path(data_path).is_file():
        raise UsageError(f"data file {data_path} does not exist; pass the .ptd saved with {pte}")
    return TextLLMRunner(str(pte), str(tokenizer), None if data_path is None else str(data_path))
