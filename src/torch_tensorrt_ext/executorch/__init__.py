"""ExecuTorch side of torch-tensorrt-ext, one package per job: `saving` (partitioner, preprocess,
backend config, `.pte` writing), `running` (the program loader, the LLM runner), `inspecting`
(reading and verifying a saved program). The blob format itself is `contracts.blob`; the runtime
library loader is `runtime_lib`. This module is the public entry: `load`, `verify`, `text_runner`,
`runner_metadata`, `save_data_externally`.

Invariant: once this package is imported, ExecuTorch's runtime in this process has the delegate
`TensorRTBackend` and the kernel `tte::kv_cache_update.out` (as ExecuTorch's own backends register
at import): its `Runtime`, `TextLLMRunner` and Module APIs run this project's programs with no
further set-up. Without the runtime library the import fails with an ImportError naming the file
(`runtime_lib.register_delegate`)."""

from .. import runtime_lib
from ..contracts.llm_metadata import runner_metadata

runtime_lib.register_delegate(__name__)

__all__ = ["load", "runner_metadata", "save_data_externally", "text_runner", "verify"]


def save_data_externally(name: str = "model"):
    """Context manager: a `torch_tensorrt.save(..., output_format="executorch")` inside it writes
    its engines' weights to `<name>.ptd` beside the `.pte` (ExecuTorch's external data file)."""
    from .saving.partition import save_data_externally as _external
    return _external(name)


def load(path, method: str | None = None, data_files=None):
    """Load a `.pte` (any methods) into ExecuTorch's runtime with this project's delegate runtime;
    `method`, when given, is the main method `run` calls by default, else `forward` or the only
    one (see `torch_tensorrt_ext.executorch.running.program.Program`); `data_files`: the `.ptd`
    its engine weights were saved to (`save_data_externally`)."""
    from .running.program import load as _load
    return _load(path, method, data_files)


def verify(pte, source) -> None:
    """Refuse a saved program (`.pte` path or bytes) that does not write each buffer `source`
    mutates exactly once per call (`source`: the ExportedProgram it was saved from, or
    `{method: program}`; `executorch.inspecting.verify_writes`), or whose methods do not hold
    one state (`executorch.inspecting.program_state`)."""
    from pathlib import Path

    from .inspecting.program_state import check_program_state, source_uses
    from .inspecting.verify_writes import mutated_by, verify_writes
    data = pte if isinstance(pte, (bytes, bytearray)) else Path(pte).read_bytes()
    verify_writes(bytes(data), mutated_by(source))
    check_program_state(bytes(data), source_uses(source))


def text_runner(pte, tokenizer, data_path=None):
    """ExecuTorch's own `TextLLMRunner` over a `.pte` of this project (loads the delegate runtime)
    and the `.ptd` of its weights when saved apart; see `executorch.running.llm.text_runner`."""
    from .running.llm import text_runner as _text_runner
    return _text_runner(pte, tokenizer, data_path)

