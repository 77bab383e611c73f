"""`reconcile`: correct the plan with what the built engines really aliased.

Invariant: after `reconcile`, an entry is KV_ALIAS iff an engine reports an aliased output whose
input binding is that buffer. A predicted KV write the engines did not alias falls back to
COPY_BACK (never an abort); if no engine output carries its new value, a `RebuildRequest` names
the engine to rebuild with the write excluded from aliasing. An engine aliasing a buffer the plan
copies back, or a buffer eager never writes, is an error naming the buffer, engine and binding.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ..contracts.engine import EngineInfo
from ..contracts.plan import MutationPlan, PlanError, RebuildRequest, WriteKind


def _index(engines: Iterable[EngineInfo]):
    aliased: dict[str, tuple[EngineInfo, str, str]] = {}    # fqn -> (engine, in, out)
    consumer: dict[str, tuple[EngineInfo, str]] = {}         # fqn -> (first engine, input binding)
    producer: dict[str, tuple[EngineInfo, str]] = {}         # fqn -> (engine, output binding)
    reads: dict[tuple[int, str], str] = {}       # (id(engine), fqn) -> its first input binding
    for e in engines:
        for binding, fqn in e.input_buffers:
            consumer.setdefault(fqn, (e, binding))
            reads.setdefault((id(e), fqn), binding)
        for binding, fqn in e.output_buffers:
            producer[fqn] = (e, binding)
        for fqn, a in e.aliased_buffers().items():
            if fqn in aliased:
                raise PlanError(f"buffer {fqn!r} is aliased by two engines: "
                                f"{aliased[fqn][0].name!r} and {e.name!r}")
            aliased[fqn] = (e, a.input, a.output)
    return aliased, consumer, producer, reads


def reconcile(plan: MutationPlan, engines: Iterable[EngineInfo]) -> MutationPlan:
    engines = list(engines)
    aliased, consumer, producer, reads = _index(engines)
    stray = [f for f in aliased if f not in plan]
    if stray:
        e, i, o = aliased[stray[0]]
        raise PlanError(f"engine {e.name!r} aliases output {o!r} to input {i!r} (buffer "
                        f"{stray[0]!r}), but eager never writes that buffer")
    writes: list = []
    rebuild: dict[str, list[str]] = {}
    for w in plan:
        if w.fqn in aliased:
            e, i, o = aliased[w.fqn]
            if w.kind is WriteKind.COPY_BACK:
                raise PlanError(
                    f"buffer {w.fqn!r} is planned COPY_BACK ({w.reason}) but engine {e.name!r} "
                    f"aliases output {o!r} to its input {i!r}; the value would be written twice. "
                    "Rebuild the engine with the write marked _trt_no_kv_alias")
            writes.append(dataclasses.replace(w, engine=e.name, input_binding=i, output_binding=o))
            continue
        if w.kind is WriteKind.KV_ALIAS:
            where = consumer.get(w.fqn)
            if where:
                why = f"engine {where[0].name!r} did not alias it"
            else:
                why = "no engine takes the buffer (the write ran outside TensorRT)"
            reason = f"predicted KV ({w.reason}) but {why}; copied back instead"
            w = dataclasses.replace(w, kind=WriteKind.COPY_BACK, reason=reason)
            if where and w.fqn not in producer:
                rebuild.setdefault(where[0].name, []).append(w.fqn)
        if w.fqn in producer:
            e, o = producer[w.fqn]
            # the buffer's input binding on the engine producing its value (none when another
            # engine reads the buffer and this one only computes the new value)
            i = reads.get((id(e), w.fqn))
            w = dataclasses.replace(w, engine=e.name, input_binding=i, output_binding=o)
        writes.append(w)
    rebuilds = tuple(RebuildRequest(name, tuple(fqns),
                                    "predicted KV writes were not aliased and the engine has no "
                                    "output carrying their new value")
                     for name, fqns in rebuild.items())
    return MutationPlan(tuple(writes), plan.rebuilds + rebuilds)
