"""Saving: a program with engine calls lowered to an ExecuTorch `.pte` — the partitioner, the
delegates' blobs (`preprocess`: reference and TensorRT), ExecuTorch's passes configured for
state in device memory and state shared between methods, and the atomic write.

Invariant: nothing is written unless the emitted program writes every buffer its source mutates
exactly once per call (`config.stateful_edge`'s `to_executorch` runs
`executorch.inspecting.verify_writes`). This package imports `inspecting` (to check what it
emits) and the layers below `executorch`; never `running`.
"""
