"""Declaring the compiled program's buffer writes in its ExportedProgram signature.

Invariant: re-exports `declare_mutations` only; see `declare` for what it guarantees."""
from .declare import declare_mutations

__all__ = ["declare_mutations"]
