"""ExecuTorch side of torch-tensorrt-ext: the partitioner, preprocess (TR03 blobs), backend
config, `.pte` writing, inspection and the program loader (the blob format itself is
`contracts.blob`; the runtime library loader is `runtime_lib`)."""


def load(path, method: str = "forward"):
    """Load a `.pte` into ExecuTorch's runtime with this project's delegate runtime
    (see `torch_tensorrt_ext.executorch.program.Program`)."""
    from .program import load as _load
    return _load(path, method)


def verify(pte, source) -> None:
    """Refuse a saved program (`.pte` path or bytes) that does not write each buffer `source`
    mutates exactly once per call (`source`: the ExportedProgram it was saved from, or
    `{method: program}`); see `executorch.verify_writes`."""
    from pathlib import Path

    from .verify_writes import mutated_by, verify_writes
    data = pte if isinstance(pte, (bytes, bytearray)) else Path(pte).read_bytes()
    verify_writes(bytes(data), mutated_by(source))
