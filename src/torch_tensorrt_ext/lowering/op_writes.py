"""What one graph node writes in place, read from its op's schema — and, for a composite op that
reads a graph input, from what it runs.

Invariant: `written_roots(node)` lists every tensor the node's op writes in place — each argument
its schema marks as written (`Tensor(a!)`), passed positionally or by keyword, alone or in a list
(`_foreach_add_`), and each input its composite kernel writes though its schema does not say
(`composite_writes`: train-mode `batch_norm`'s running statistics; looked for only where an
argument is a view of a graph input, where state lives) — each followed back through view ops to
the tensor it aliases. `hides_write(node)` says whether any of them is of the second kind: fx's
dead-code elimination does not see such a write. An op without a schema (a higher-order op, a
Python callable) writes nothing here; callers that must not miss what such an op writes look at
its inputs themselves.
"""
from __future__ import annotations


from torch.fx import Node

from .composite_writes import hidden_writes

_WRITTEN: dict[object, tuple[tuple[int, str], ...]] = {}   # op -> (position, name) it mutates


def _written(node: Node) -> tuple[tuple[int, str], ...]:
    if node.op != "call_function":
        return ()
    target = node.target
    try:
        return _WRITTEN[target]
    except KeyError:
        pass
    except TypeError:   # an unhashable target: not an op with a schema
        return ()
    schema = getattr(target, "_schema", None)
    positions = () if schema is None else tuple(
        (i, a.name) for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write)
    _WRITTEN[target] = positions
    return positions


def is_view(node: Node) -> bool:
    """Whether the op returns an alias of its first argument (slice, select, view, ...)."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or not schema.returns:
        return False
    ret = schema.returns[0].alias_info
    return ret is not None and not ret.is_write


def view_root(node: object) -> Node | None:
    """Follow view ops back to the tensor they alias."""
    while isinstance(node, Node) and is_view(node):
        node = node.args[0]
    return node if isinstance(node, Node) else None


def _hidden(node: Node) -> tuple[tuple[int, str], ...]:
    """`hidden_writes(node)` where an argument is a view of a graph input, else ()."""
    if node.op != "call_function" or not any(
            getattr(view_root(a), "op", None) in ("placeholder", "get_attr")
            for a in node.all_input_nodes):
        return ()
    return hidden_writes(node)


def hides_write(node: Node) -> bool:
    """Whether the node writes a graph input in place that its op's schema does not declare."""
    return bool(_hidden(node))


def hidden_roots(node: Node) -> list[Node]:
    """The tensors among `written_roots(node)` that its op's schema does not declare written."""
    return _roots(node, _hidden(node))


def written_roots(node: Node) -> list[Node]:
    """The tensors the node writes in place, each followed back through views."""
    return _roots(node, _written(node) + _hidden(node))


def _roots(node: Node, positions) -> list[Node]:
    roots = []
    for i, name in positions:
        arg = node.args[i] if i < len(node.args) else node.kwargs.get(name)
        for a in (arg if isinstance(arg, (list, tuple)) else (arg,)):
            root = view_root(a)
            if root is not None:
                roots.append(root)
    return roots


__all__ = ["hidden_roots", "hides_write", "is_view", "view_root", "written_roots"]
