"""Engine interface: what the passes and the runtime need of a compiled engine.

Invariant: every engine implementation (TensorRT, reference) is described by one `EngineInfo`;
nothing downstream of engine building looks at engine internals.
"""
from ..contracts.engine import AliasedIO, EngineInfo

__all__ = ["AliasedIO", "EngineInfo"]
