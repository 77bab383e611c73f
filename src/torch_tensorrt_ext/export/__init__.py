"""Declaring the compiled program's buffer writes in its ExportedProgram signature."""
from .declare import declare_mutations

__all__ = ["declare_mutations"]
