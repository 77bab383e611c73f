"""What the torch-tensorrt 2.14.0 patch series calls (`patches/torch_tensorrt/`).

Invariant: every function here is the package side of exactly one seam in upstream's code; a
seam's upstream side stays a few lines that hand over to these functions, so behaviour lives
in this package, where it is tested, and the patches stay thin.
"""
