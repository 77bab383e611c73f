"""A Linear's weight stored transposed, so a reference engine never transposes it per call.

ExecuTorch lowers `aten.linear(x, W, b)` to `permute_copy(W)` + `addmm`: every call of the
payload copies every Linear weight into planned memory (the weights' bytes again in RSS, and
their copy on every decode step). A weight is a constant; its transpose can be stored instead.

Invariant: after `linear_weights_transposed(gm)`, every 2-D floating-point tensor constant of
`gm` whose every use is the weight of an `aten.linear` is replaced by a constant holding its
transpose (a *view* — no bytes are copied here; `weights.held` snapshots them once,
transposed, for every engine holding them) and each such `linear(x, W, b)` by `matmul(x, Wᵀ)`
(+ `b`), which computes the same values and which ExecuTorch lowers to `mm` on the stored bytes,
with no copy of the weight. A half-precision Linear whose bias is a constant stores its bias as
one more row of the transposed weight and multiplies `[x, 1]` by it (`mm([x, 1], [Wᵀ; b])`):
ExecuTorch's `mm` accumulates in fp32 and rounds once, as eager's biased Linear does, where the
product and then `+ b` would round twice (docs/KERNEL_FORMS.md).
A weight also read by anything else (a tied embedding) is left as it is.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from .fake_calls import add_call
from .weights import attr_of, drop_attr

__all__ = ["linear_weights_transposed"]

_LINEAR = torch.ops.aten.linear.default


def _only_linear_weight(node: Node) -> bool:
    return bool(node.users) and all(
        u.op == "call_function" and u.target is _LINEAR and len(u.args) > 1
        and u.args[1] is node and node not in (u.args[0], *u.args[2:]) for u in node.users)


_HALF = (torch.float16, torch.bfloat16)


def _bias(linear: Node):
    return linear.args[2] if len(linear.args) > 2 else linear.kwargs.get("bias")


def _one_constant_bias(gm: GraphModule, weight: Node) -> Node | None:
    """The get_attr of the bias every Linear reading `weight` adds, when it is one constant of
    the weight's dtype: it can be stored as one more row of the transposed weight."""
    biases = {_bias(u) for u in weight.users}
    if len(biases) != 1:
        return None
    (node,) = biases
    if getattr(node, "op", None) != "get_attr":
        return None
    b, w = attr_of(gm, node.target), attr_of(gm, weight.target)
    if not isinstance(b, torch.Tensor) or b.dim() != 1 or b.dtype != w.dtype \
            or b.shape[0] != w.shape[0]:
        return None
    return node


def _rewrite(gm: GraphModule, linear: Node, weight_t: Node, bias_row: bool = False) -> None:
    graph = gm.graph
    x, bias = linear.args[0], _bias(linear)
    with graph.inserting_before(linear):
        if bias_row:       # [x, 1] @ [Wᵀ; b]: one product, one rounding
            last = add_call(graph, torch.ops.aten.slice.Tensor, x, -1, 0, 1)
            ones = add_call(graph, torch.ops.aten.ones_like.default, last)
            x1 = add_call(graph, torch.ops.aten.cat.default, [x, ones], -1)
            made = [last, ones, x1, add_call(graph, torch.ops.aten.matmul.default, x1, weight_t)]
            bias = None
        else:
            made = [add_call(graph, torch.ops.aten.matmul.default, x, weight_t)]
        if bias is not None:
            made.append(add_call(graph, torch.ops.aten.add.Tensor, made[0], bias))
    for node in made:       # the Linear's own meta (its stack, module path), its own value
        node.meta = {**linear.meta, "val": node.meta.get("val")}
    out = made[-1]
    linear.replace_all_uses_with(out)
    graph.erase_node(linear)


def linear_weights_transposed(gm: GraphModule) -> int:
    """Store each Linear-only weight of `gm` transposed (module docstring); how many were."""
    graph, n = gm.graph, 0
    for node in [n for n in graph.nodes if n.op == "get_attr"]:
        w = attr_of(gm, node.target)
        if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_floating_point() \
                or not _only_linear_weight(node):
            continue
        name = f"_tte_linear_weight_t_{n}"
        # a view: the bytes are copied once, by weights.held (weights_as_inputs makes it an input);
        # with its bias row, one copy here
        bias = _one_constant_bias(gm, node) if w.dtype in _HALF else None
        stored = w.detach().t() if bias is None else \
            torch.cat([w.detach().t(), attr_of(gm, bias.target).detach()[None]])
        gm.register_buffer(name, stored, persistent=False)
        with graph.inserting_after(node):
            weight_t = graph.get_attr(name)
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            weight_t.meta["val"] = val.new_empty(tuple(stored.shape))
        for linear in list(node.users):
            _rewrite(gm, linear, weight_t, bias_row=bias is not None)
        for done in (node, *([bias] if bias is not None and not bias.users else [])):
            graph.erase_node(done)
            if not any(m.op == "get_attr" and m.target == done.target for m in graph.nodes):
                drop_attr(gm, done.target)   # else an export of the partition would still hold it
        n += 1
    if n:
        graph.lint()
        gm.recompile()
    return n
