"""ExecuTorch side of torch-tensorrt-ext: the delegate blob format, the runtime library loader,
the partitioner/preprocess and the program loader."""


def load(path, method: str = "forward"):
    """Load a `.pte` into ExecuTorch's runtime with this project's delegate runtime
    (see `torch_tensorrt_ext.executorch.program.Program`)."""
    from .program import load as _load
    return _load(path, method)
