"""The `MutationPlan`: one typed, immutable decision per mutated buffer.

Invariant: a plan holds exactly one `BufferWrite` per buffer the program mutates, keyed by the
buffer's fully qualified name, in the program's output order. Plans are never edited in place: every
stage (`reconcile`, binding) returns a new plan. Every entry carries a reason a person can act on,
and says who writes the new value into the buffer (`copier`): a KV write is always its engine's
(in place); a copy-back write is the program's unless the one decision of who copies
(`lowering.copier.decide`, made at compile) gave it to the engine that produces the value
(`engine_copies`: its delegate copies the value into the buffer, in a `.pte` on the device).
"""
from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from collections.abc import Iterator

from ..errors import TteError, UnknownName


class WriteKind(enum.Enum):
    """How a buffer's new value gets back into the buffer."""

    KV_ALIAS = "kv_alias"     # the engine writes in place through the input's address
    COPY_BACK = "copy_back"   # the new value leaves the engine and is copied back once

    def __str__(self) -> str:  # pragma: no cover - cosmetic
        return self.value


class Copier(enum.Enum):
    """Who writes a buffer's new value into the buffer — and so how its mutation is declared."""

    ENGINE = "engine"     # the engine itself: in place (KV), or by copying its output into the
    #                       buffer; declared on the buffer's own placeholder, no write-back copy
    PROGRAM = "program"   # the program: the value leaves the engine and is written back
    #                       (`aten.copy_` in the module, ExecuTorch's write-back in a .pte)

    def __str__(self) -> str:  # pragma: no cover - cosmetic
        return self.value


@dataclass(frozen=True)
class BufferWrite:
    """The decision for one mutated buffer.

    `op` is the aten op that produces the buffer's new value (e.g. `aten.index_copy.default`),
    `node` the name of that node in the program the plan was made from. The binding fields are
    empty until engines exist (`reconcile` fills them).

    `copier` says who writes the new value into the buffer. It follows from the kind, except
    for a copy-back write whose engine copies its output into the buffer itself
    (`engine_copies`, set by the compile seam where it hands the copy over; it needs the engine
    and both bindings). Storing only that exception keeps a KV write turned copy-back (by
    `reconcile` or a rebuild) the program's copy without anyone resetting it.
    """

    fqn: str
    kind: WriteKind
    op: str
    reason: str
    node: str = ""
    engine: str | None = None
    input_binding: str | None = None
    output_binding: str | None = None
    engine_copies: bool = False

    def __post_init__(self) -> None:
        if self.kind is WriteKind.KV_ALIAS and self.engine_copies:
            object.__setattr__(self, "engine_copies", False)   # a KV write is the engine's anyway
        if self.engine_copies and None in (self.engine, self.input_binding, self.output_binding):
            raise PlanError(f"buffer {self.fqn!r}: its engine copies it back, but the plan names "
                            f"no engine and bindings for it (engine {self.engine!r}, input "
                            f"{self.input_binding!r}, output {self.output_binding!r})")

    @property
    def is_kv(self) -> bool:
        return self.kind is WriteKind.KV_ALIAS

    @property
    def copier(self) -> Copier:
        """Who writes the new value into the buffer: the engine (KV in place, or its own copy)
        or the program (a write-back of the value the engine hands out)."""
        if self.kind is WriteKind.KV_ALIAS or self.engine_copies:
            return Copier.ENGINE
        return Copier.PROGRAM

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        del d["engine_copies"]
        d["kind"] = self.kind.value
        d["copier"] = self.copier.value
        return d

    @classmethod
    def from_dict(cls, d: dict) -> BufferWrite:
        """The inverse of `to_dict`; an entry without "copier" gets its kind's own."""
        d = dict(d)
        copier = d.pop("copier", None)
        copier = None if copier is None else Copier(copier)
        w = cls(kind=WriteKind(d.pop("kind")), engine_copies=copier is Copier.ENGINE, **d)
        if copier is not None and copier is not w.copier:   # only a KV write can disagree
            raise PlanError(f"buffer {w.fqn!r}: a KV_ALIAS write is written in place by "
                            f"its engine, but the plan says copier {copier.value!r}")
        return w


@dataclass(frozen=True)
class RebuildRequest:
    """An engine must be rebuilt with the named buffers' writes excluded from KV aliasing."""

    engine: str
    exclude_from_aliasing: tuple[str, ...]
    reason: str

    def to_dict(self) -> dict:
        return {"engine": self.engine, "exclude_from_aliasing": list(self.exclude_from_aliasing),
                "reason": self.reason}


class PlanError(TteError, ValueError):
    """A program whose buffer writes cannot be planned (names the buffer or node)."""


@dataclass(frozen=True)
class MutationPlan:
    """Iterable over `BufferWrite`s; `plan["layers.0.attn.k_cache"]` looks one up by FQN."""

    writes: tuple[BufferWrite, ...] = ()
    rebuilds: tuple[RebuildRequest, ...] = ()
    _by_fqn: dict[str, BufferWrite] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, BufferWrite] = {}
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
        raise UnknownName(f"buffer {fqn!r} is not written by this program; "
                       f"written buffers: {[w.fqn for w in self.writes]}")

    @property
    def fqns(self) -> tuple[str, ...]:
        return tuple(w.fqn for w in self.writes)

    def kv(self) -> tuple[BufferWrite, ...]:
        return tuple(w for w in self.writes if w.kind is WriteKind.KV_ALIAS)

    def copy_back(self) -> tuple[BufferWrite, ...]:
        return tuple(w for w in self.writes if w.kind is WriteKind.COPY_BACK)

    def kinds(self) -> dict[str, WriteKind]:
        return {w.fqn: w.kind for w in self.writes}

    def copiers(self) -> dict[str, Copier]:
        return {w.fqn: w.copier for w in self.writes}

    def replace(self, fqn: str, **changes) -> MutationPlan:
        """A new plan with entry `fqn` changed (e.g. `kind=`, `reason=`, bindings,
        `engine_copies=`)."""
        self[fqn]  # raises KeyError naming the buffer
        writes = tuple(dataclasses.replace(w, **changes) if w.fqn == fqn else w
                       for w in self.writes)
        return dataclasses.replace(self, writes=writes)

    def to_dict(self) -> dict:
        return {"writes": [w.to_dict() for w in self.writes],
                "rebuilds": [r.to_dict() for r in self.rebuilds]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict) -> MutationPlan:
        writes = tuple(BufferWrite.from_dict(w) for w in d["writes"])
        rebuilds = tuple(RebuildRequest(r["engine"], tuple(r["exclude_from_aliasing"]), r["reason"])
                         for r in d.get("rebuilds", ()))
        return cls(writes, rebuilds)

    def __str__(self) -> str:
        if not self.writes:
            return "MutationPlan: no buffer is mutated"
        width = max(len(w.fqn) for w in self.writes)
        lines = [f"MutationPlan: {len(self.kv())} KV_ALIAS, {len(self.copy_back())} COPY_BACK "
                 "(copier: ENGINE writes the buffer itself, PROGRAM writes the value back)"]
        for w in self.writes:
            binding = ""
            if w.engine:
                binding = f"  [{w.engine}: {w.input_binding} -> {w.output_binding}]"
            lines.append(f"  {w.fqn:<{width}}  {w.kind.name:<9}  {w.copier.name:<7}  {w.op:<28}  "
                         f"{w.reason}{binding}")
        for r in self.rebuilds:
            lines.append(f"  rebuild {r.engine} excluding {list(r.exclude_from_aliasing)}: "
                         f"{r.reason}")
        return "\n".join(lines)
