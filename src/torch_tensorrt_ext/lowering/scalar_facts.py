"""What the program knows about a scalar read from data, written into a graph as checks.

torch.export records what a model asserts about a value it reads with `.item()` (its range, and
`start + T <= max_len` for a `narrow` at that start) in its shape environment and as
`aten._assert_scalar` nodes; torch-tensorrt's lowering drops the nodes. A graph traced again — a
reference engine's payload, the compiled module's parent graph when it is exported — knows
nothing of the value but what is asserted in it, and sizes a view at that start as
`Max(0, Min(16, start + T) - start)`, which nothing after can order or plan.

Invariant: `assert_facts` writes each fact as one `aten._assert_scalar` over the graph's own
nodes for its symbols (the read, or a `sym_size` of an input that carries a dimension), in terms
the shape environment recorded; a fact over a symbol the graph has no node for is not written.
"""
from __future__ import annotations

import operator

import torch
from torch.fx import Graph, Node

__all__ = ["assert_facts", "assert_program_facts", "program_facts", "sym_expr"]


def program_facts(env, bound, known) -> list:
    """The shape environment's facts about the `bound` symbols: each one's range, and every
    runtime assertion over them and the `known` symbols alone."""
    import sympy
    from torch.fx.experimental.symbolic_shapes import free_symbols

    facts = []
    for u in bound:
        r = env.var_to_range.get(u)
        if r is not None and r.lower.is_finite:
            facts.append(sympy.Ge(u, r.lower))
        if r is not None and r.upper.is_finite:
            facts.append(sympy.Le(u, r.upper))
    known = set(bound) | set(known)
    for asserts in env.deferred_runtime_asserts.values():
        for ra in asserts:
            syms = free_symbols(ra.expr)
            if syms & set(bound) and syms <= known and ra.expr not in facts:
                facts.append(ra.expr)
    return facts


def assert_facts(graph: Graph, facts, values: dict) -> None:
    """At the graph's insertion point, an `aten._assert_scalar` of each fact, its symbols the
    nodes `values` maps them to."""
    from torch.utils._sympy.interp import sympy_interp
    from torch.utils._sympy.reference import PythonReferenceAnalysis

    tracer = torch.fx.proxy.GraphAppendingTracer(graph)
    proxies = {e: torch.fx.Proxy(n, tracer) for e, n in values.items()}
    for fact in facts:
        check = sympy_interp(PythonReferenceAnalysis, proxies, fact)
        graph.call_function(torch.ops.aten._assert_scalar.default,
                            (check.node, f"the program's runtime assertion {fact}"))


def sym_expr(val):
    """The sympy expression of a symbolic int or bool; None for anything else."""
    return val.node.expr if isinstance(val, (torch.SymInt, torch.SymBool)) else None


def _val(n: Node):
    """A node's value; for a read of a submodule call's result (a partitioned graph's nodes carry
    none), the value the submodule's output holds."""
    if "val" in n.meta or n.target is not operator.getitem or \
            not isinstance(n.args[0], Node) or n.args[0].op != "call_module":
        return n.meta.get("val")
    sub = n.graph.owning_module.get_submodule(n.args[0].target)
    outs = sub.graph.output_node().args[0]
    out = outs[n.args[1]] if isinstance(outs, (tuple, list)) else None
    return out.meta.get("val") if isinstance(out, Node) else None


def assert_program_facts(graph: Graph, nodes: list[Node]) -> None:
    """The program's facts about each scalar read from data that `nodes` use (a node whose value
    is that unbacked symbol), over those reads and the sizes of the graph's inputs: each before
    the first of `nodes`, or right after the last read it names where that comes later."""
    import sympy
    from torch.fx.experimental.symbolic_shapes import free_symbols, free_unbacked_symbols

    used: set = set()
    for n in nodes:
        for v in (_val(n), *n.args):
            if isinstance(v, Node):
                v = _val(v)
            if isinstance(v, torch.Tensor):
                for s in (*v.shape, v.storage_offset()):
                    used |= free_unbacked_symbols(s) if isinstance(s, torch.SymInt) else set()
            elif isinstance(v, torch.SymInt):
                used |= free_unbacked_symbols(v)
    bound: dict = {}
    env = None
    for n in graph.nodes:
        e = sym_expr(_val(n))
        if isinstance(e, sympy.Symbol) and e in used and e not in bound:
            bound[e], env = n, _val(n).node.shape_env
    if not bound:
        return
    first: dict = {}
    for ph in (n for n in graph.nodes if n.op == "placeholder"):
        val = ph.meta.get("val")
        for d, s in enumerate(val.shape if isinstance(val, torch.Tensor) else ()):
            if isinstance(sym_expr(s), sympy.Symbol):
                first.setdefault(sym_expr(s), (ph, d))
    facts = program_facts(env, bound, first)
    wanted = {e for f in facts for e in free_symbols(f)}
    phs = [n for n in graph.nodes if n.op == "placeholder"]
    sizes = {}
    for e, (ph, d) in first.items():
        if e in wanted and e not in bound:
            with graph.inserting_before(phs[-1].next):
                sizes[e] = graph.call_function(torch.ops.aten.sym_size.int, (ph, d))
            sizes[e].meta["val"] = next(s for s in ph.meta["val"].shape if sym_expr(s) == e)
    values = {**bound, **sizes}
    order = {n: i for i, n in enumerate(graph.nodes)}
    first_use = nodes[0]
    for fact in facts:     # after the reads it names, before the nodes when they allow it
        last = max((values[e] for e in free_symbols(fact)), key=order.__getitem__)
        at = first_use if order[last] < order[first_use] else last.next
        with graph.inserting_before(at):
            assert_facts(graph, [fact], values)
