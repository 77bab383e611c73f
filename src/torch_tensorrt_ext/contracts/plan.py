"""The `MutationPlan`: one typed, immutable decision per mutated buffer.

Invariant: a plan holds exactly one `BufferWrite` per buffer the program mutates, keyed by the
buffer's fully qualified name, in the program's output order. Plans are never edited in place: every
stage (`reconcile`, binding) returns a new plan. Every entry carries a reason a person can act on.
"""
from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from typing import Dict, Iterator, Optional, Tuple

from ..errors import TteError


class WriteKind(enum.Enum):
    """How a buffer's new value gets back into the buffer."""

    KV_ALIAS = "kv_alias"     # the engine writes in place through the input's address
    COPY_BACK = "copy_back"   # the new value leaves the engine and is copied back once

    def __str__(self) -> str:  # pragma: no cover - cosmetic
        return self.value


@dataclass(frozen=True)
class BufferWrite:
    """The decision for one mutated buffer.

    `op` is the aten op that produces the buffer's new value (e.g. `aten.index_copy.default`),
    `node` the name of that node in the program the plan was made from. The binding fields are
    empty until engines exist (`reconcile` fills them).
    """

    fqn: str
    kind: WriteKind
    op: str
    reason: str
    node: str = ""
    engine: Optional[str] = None
    input_binding: Optional[str] = None
    output_binding: Optional[str] = None

    @property
    def is_kv(self) -> bool:
        return self.kind is WriteKind.KV_ALIAS

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["kind"] = self.kind.value
        return d


@dataclass(frozen=True)
class RebuildRequest:
    """An engine must be rebuilt with the named buffers' writes excluded from KV aliasing."""

    engine: str
    exclude_from_aliasing: Tuple[str, ...]
    reason: str

    def to_dict(self) -> dict:
        return {"engine": self.engine, "exclude_from_aliasing": list(self.exclude_from_aliasing),
                "reason": self.reason}


class PlanError(TteError, ValueError):
    """A program whose buffer writes cannot be planned (names the buffer or node)."""


@dataclass(frozen=True)
class MutationPlan:
    """Iterable over `BufferWrite`s; `plan["layers.0.attn.k_cache"]` looks one up by FQN."""

    writes: Tuple[BufferWrite, ...] = ()
    rebuilds: Tuple[RebuildRequest, ...] = ()
    _by_fqn: Dict[str, BufferWrite] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: Dict[str, BufferWrite] = {}
        for w in self.writes:
            if w.fqn in index:
                raise PlanError(f"buffer {w.fqn!r} appears twice in the plan")
            index[w.fqn] = w
        object.__setattr__(self, "_by_fqn", index)

    def __iter__(self) -> Iterator[BufferWrite]:
        return iter(self.writes)

    def __len__(self) -> int:
        return len(self.writes)

    def __contains__(self, fqn: object) -> bool:
        return fqn in self._by_fqn

    def __getitem__(self, fqn: str) -> BufferWrite:
        if fqn in self._by_fqn:
            return self._by_fqn[fqn]
        raise KeyError(f"buffer {fqn!r} is not written by this program; "
                       f"written buffers: {[w.fqn for w in self.writes]}")

    @property
    def fqns(self) -> Tuple[str, ...]:
        return tuple(w.fqn for w in self.writes)

    def kv(self) -> Tuple[BufferWrite, ...]:
        return tuple(w for w in self.writes if w.kind is WriteKind.KV_ALIAS)

    def copy_back(self) -> Tuple[BufferWrite, ...]:
        return tuple(w for w in self.writes if w.kind is WriteKind.COPY_BACK)

    def kinds(self) -> Dict[str, WriteKind]:
        return {w.fqn: w.kind for w in self.writes}

    def replace(self, fqn: str, **changes) -> "MutationPlan":
        """A new plan with entry `fqn` changed (e.g. `kind=`, `reason=`, bindings)."""
        self[fqn]  # raises KeyError naming the buffer
        writes = tuple(dataclasses.replace(w, **changes) if w.fqn == fqn else w
                       for w in self.writes)
        return dataclasses.replace(self, writes=writes)

    def to_dict(self) -> dict:
        return {"writes": [w.to_dict() for w in self.writes],
                "rebuilds": [r.to_dict() for r in self.rebuilds]}

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict) -> "MutationPlan":
        writes = tuple(BufferWrite(**{**w, "kind": WriteKind(w["kind"])}) for w in d["writes"])
        rebuilds = tuple(RebuildRequest(r["engine"], tuple(r["exclude_from_aliasing"]), r["reason"])
                         for r in d.get("rebuilds", ()))
        return cls(writes, rebuilds)

    def __str__(self) -> str:
        if not self.writes:
            return "MutationPlan: no buffer is mutated"
        width = max(len(w.fqn) for w in self.writes)
        lines = [f"MutationPlan: {len(self.kv())} KV_ALIAS, {len(self.copy_back())} COPY_BACK"]
        for w in self.writes:
            binding = ""
            if w.engine:
                binding = f"  [{w.engine}: {w.input_binding} -> {w.output_binding}]"
            lines.append(f"  {w.fqn:<{width}}  {w.kind.name:<9}  {w.op:<28}  {w.reason}{binding}")
        for r in self.rebuilds:
            lines.append(f"  rebuild {r.engine} excluding {list(r.exclude_from_aliasing)}: "
                         f"{r.reason}")
        return "\n".join(lines)
