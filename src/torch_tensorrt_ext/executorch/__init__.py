"""ExecuTorch side of torch-tensorrt-ext: the partitioner, preprocess (TR03 blobs), backend
config, `.pte` writing, inspection and the program loader (the blob format itself is
`contracts.blob`; the runtime library loader is `runtime_lib`)."""


def load(path, method: str = "forward"):
    """Load a `.pte` into ExecuTorch's runtime with this project's delegate runtime
    (see `torch_tensorrt_ext.executorch.program.Program`)."""
    from .program import load as _load
    return _load(path, method)
