"""torch-tensorrt-ext: stateful models through Torch-TensorRT into ExecuTorch.

Invariant: this module re-exports the public API named in DESIGN.md and nothing else.
"""
