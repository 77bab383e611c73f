"""The export stage: the compiled program's buffer writes declared in its ExportedProgram
signature (`declare`), its engine calls read (`engine_calls`), and `torch_tensorrt.Input` specs
turned into what torch.export takes (`dynamic_specs`).

Invariant: re-exports `declare_mutations` only; see each module for what it guarantees."""
from .declare import declare_mutations

__all__ = ["declare_mutations"]
