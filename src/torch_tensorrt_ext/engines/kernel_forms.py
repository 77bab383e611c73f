"""Forms of the calls ExecuTorch's kernels compute otherwise than ATen, rewritten into forms of
the same values they compute as ATen does — a table of rewrites, like `prims_to_aten`.

ExecuTorch's portable/optimized kernels crash on, refuse or compute otherwise than eager a few
calls a partition may make: an int32 index of gather/scatter (error 0x12), an integer
`remainder` (the dividend's sign: 5 % -3 is 2, ATen's -1), a `sum` over a dim or a `cumsum` of
a 0-d tensor (the float sum aborts the process), a 0-d half-precision tensor in arithmetic with
a float scalar (lowered to an fp32 result), a half-precision call ATen accumulates in fp32
(a running sum, a variance, layer or batch statistics, a convolution) or a half-precision product
with a bias (`linear` with a bias, `addmm`) — ExecuTorch accumulates those in the input's dtype,
far more than one rounding from eager (measurements in docs/KERNEL_FORMS.md) — and a
half-precision attention on transposed q, k, v (it cannot map their dim order).

Invariant: `kernel_forms(gm)` rewrites, in place, each call the first entry of `_FORMS` that
applies to it names into calls computing the same values as ATen (same dtype and shape,
`meta["val"]` kept through `add_call`), and touches nothing else; a call no entry applies to is
left for ExecuTorch as it is. `is_dense` is ExecuTorch's notion of a row-major tensor.
"""
from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node

from .fake_calls import add_call

__all__ = ["has_kernel_forms", "kernel_forms", "is_dense"]

_ATEN = torch.ops.aten
_HALF = (torch.bfloat16, torch.float16)


def _dtype_of(arg):
    val = arg.meta.get("val") if isinstance(arg, Node) else None
    return val.dtype if isinstance(val, torch.Tensor) else None


# --- an int32 index of gather/scatter, widened to int64 (the kernels refuse int32, 0x12) -------

# calls whose index ExecuTorch's kernels take as int64 only (ATen takes int32 too): position
_INT64_INDEX = {_ATEN.gather.default: 2, _ATEN.scatter.src: 2, _ATEN.scatter.value: 2,
                _ATEN.scatter_add.default: 2, _ATEN.scatter_reduce.two: 2}


def _int32_index(n: Node) -> bool:
    pos = _INT64_INDEX.get(n.target) if n.op == "call_function" else None
    return pos is not None and _dtype_of(n.args[pos]) == torch.int32


def _index_as_int64(graph, n: Node) -> None:
    pos = _INT64_INDEX[n.target]
    with graph.inserting_before(n):
        wide = add_call(graph, _ATEN._to_copy.default, n.args[pos], dtype=torch.int64)
    n.update_arg(pos, wide)


# --- an integer remainder as `a - floor_divide(a, b) * b` (ExecuTorch's takes a's sign) -------

def _is_integer_remainder(n: Node) -> bool:
    val = n.meta.get("val")
    return n.target is _ATEN.remainder.Tensor and isinstance(val, torch.Tensor) \
        and not val.dtype.is_floating_point and val.dtype != torch.bool


def _integer_remainder(graph, n: Node) -> None:
    a, b = n.args
    with graph.inserting_before(n):
        q = add_call(graph, _ATEN.floor_divide.default, a, b)
        r = add_call(graph, _ATEN.sub.Tensor, a, add_call(graph, _ATEN.mul.Tensor, q, b))
    n.replace_all_uses_with(r)
    graph.erase_node(n)


# --- a reduction of a 0-d tensor over a dim, on its one-element 1-d view ----------------------

# calls ExecuTorch's kernels fail on a 0-d input, by what their dim argument becomes on its
# one-element 1-d view, and whether their result must be viewed back to 0-d (ATen takes dim 0
# or -1 of a 0-d tensor as the tensor itself)
_ZERO_D_AS_1D = {_ATEN.sum.dim_IntList: ([0], False), _ATEN.cumsum.default: (0, True)}


def _zero_d(arg) -> bool:
    val = arg.meta.get("val") if isinstance(arg, Node) else None
    return isinstance(val, torch.Tensor) and val.dim() == 0


def _zero_d_reduction(n: Node) -> bool:
    return n.target in _ZERO_D_AS_1D and _zero_d(n.args[0])


def _on_one_element_view(graph, n: Node) -> None:
    """`n` (a call of `_ZERO_D_AS_1D` on a 0-d tensor) made on the tensor's [1] view, over dim
    0 without keepdim (a 0-d result, as ATen gives for any keepdim)."""
    dim, view_back = _ZERO_D_AS_1D[n.target]
    with graph.inserting_before(n):
        flat = add_call(graph, _ATEN.view.default, n.args[0], [1])
        args = (flat, dim) + ((False,) if n.target is _ATEN.sum.dim_IntList else n.args[2:])
        kwargs = {k: v for k, v in n.kwargs.items() if k not in ("dim", "keepdim")}
        made = add_call(graph, n.target, *args, **kwargs)
        out = add_call(graph, _ATEN.view.default, made, []) if view_back else made
    n.replace_all_uses_with(out)
    graph.erase_node(n)


# --- a 0-d half-precision tensor with a float scalar, on its one-element 1-d view -------------

# ExecuTorch 1.5.1's edge lowering makes the scalar a 0-d fp32 tensor and promotes the pair as
# two 0-d tensors: fp32, where ATen keeps the tensor's dtype (a Python scalar is weaker) — an fp16
# `mean().to(torch.float16) * 0.1` came back fp32, and the runtime refused the binding's dtype
_SCALAR_ARITHMETIC = {_ATEN.add.Tensor, _ATEN.add.Scalar, _ATEN.sub.Tensor, _ATEN.sub.Scalar,
                      _ATEN.mul.Tensor, _ATEN.mul.Scalar, _ATEN.div.Tensor, _ATEN.div.Scalar,
                      _ATEN.rsub.Tensor, _ATEN.rsub.Scalar}


def _zero_d_half_with_float(n: Node) -> bool:
    return n.op == "call_function" and n.target in _SCALAR_ARITHMETIC and len(n.args) > 1 \
        and _zero_d(n.args[0]) and _dtype_of(n.args[0]) in _HALF \
        and isinstance(n.args[1], float)


def _with_float_on_one_element_view(graph, n: Node) -> None:
    """`n` made on its 0-d tensor's [1] view, its result viewed back to 0-d."""
    with graph.inserting_before(n):
        flat = add_call(graph, _ATEN.view.default, n.args[0], [1])
        made = add_call(graph, n.target, flat, *n.args[1:], **n.kwargs)
        out = add_call(graph, _ATEN.view.default, made, [])
    n.replace_all_uses_with(out)
    graph.erase_node(n)


# --- a half-precision call ATen accumulates in fp32, made in fp32 and rounded back once -------

# calls ATen makes on half-precision inputs with fp32 accumulation (ExecuTorch's kernels in the
# input's dtype): their results differ from eager's by far more than one rounding
# (functional calls only: a call writing an input in place would write the widened copy)
_IN_FP32 = {_ATEN.cumsum.default, _ATEN._native_batch_norm_legit.no_stats,
            _ATEN.var.correction, _ATEN.var_mean.correction, _ATEN.native_layer_norm.default,
            _ATEN.layer_norm.default, _ATEN.convolution.default}


def _half_accumulating(n: Node) -> bool:
    return n.target in _IN_FP32 and _dtype_of(n.args[0]) in _HALF \
        and "dtype" not in n.kwargs and (isinstance(n.meta.get("val"), torch.Tensor) or all(
            u.target is operator.getitem for u in n.users))


def _made_in_fp32(graph, n: Node) -> None:
    """`n` on its half-precision tensor inputs widened to fp32, each result (read through
    getitem where `n` makes several) rounded back to its own dtype."""
    def wide(a):
        return add_call(graph, _ATEN._to_copy.default, a, dtype=torch.float32) \
            if _dtype_of(a) in _HALF else a
    vals = n.meta["val"]
    with graph.inserting_before(n):
        made = add_call(graph, n.target, *torch.fx.map_arg(n.args, wide),
                        **torch.fx.map_arg(n.kwargs, wide))
        if not isinstance(vals, (tuple, list)):
            n.replace_all_uses_with(
                add_call(graph, _ATEN._to_copy.default, made, dtype=vals.dtype))
    if isinstance(vals, (tuple, list)):
        for user in list(n.users):            # getitem(n, i): one result each
            with graph.inserting_before(user):
                got = add_call(graph, operator.getitem, made, user.args[1])
                back = add_call(graph, _ATEN._to_copy.default, got,
                                dtype=vals[user.args[1]].dtype)
            user.replace_all_uses_with(back)
            graph.erase_node(user)
    graph.erase_node(n)


# --- a half-precision attention on transposed views, on row-major copies of them --------------

def _is_attention(n: Node) -> bool:
    return n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and \
        n.target.name().startswith(("aten::scaled_dot_product", "aten::_scaled_dot_product"))


def _half_attention_on_views(n: Node) -> bool:
    return _is_attention(n) and _dtype_of(n.args[0]) in _HALF and any(
        not is_dense(a.meta["val"]) for a in n.all_input_nodes
        if isinstance(a.meta.get("val"), torch.Tensor))


def _row_major_args(graph, n: Node) -> None:
    """`n` on row-major copies of its non-row-major tensor arguments. ExecuTorch decomposes a
    half-precision attention by widening q, k and v to fp32 with layout-keeping copies, which it
    cannot map for a transposed [B, S, H, D] → [B, H, S, D] view (every transformers decoder's
    q, k, v): "Failed to map a given dim_order: [0, 2, 1, 3]"."""
    def dense(a):
        if not isinstance(a, Node) or not isinstance(a.meta.get("val"), torch.Tensor) \
                or is_dense(a.meta["val"]):
            return a
        with graph.inserting_before(n):
            return add_call(graph, _ATEN.clone.default, a, memory_format=torch.contiguous_format)
    n.args = tuple(dense(a) for a in n.args)
    n.kwargs = {k: dense(v) for k, v in n.kwargs.items()}


# --- a half-precision product with a bias, as the product, then the bias added ----------------
# (ExecuTorch accumulates the biased product in the input's dtype; its `mm` it does not)

# a product with a bias -> its bias (None: no bias to take out)
_BIASED_PRODUCTS = {
    _ATEN.linear.default: lambda n: n.args[2] if len(n.args) > 2 else n.kwargs.get("bias"),
    _ATEN.addmm.default: lambda n: n.args[0] if n.kwargs.get("beta", 1) != 0 else None,
}


def _half_biased_product(n: Node) -> bool:
    return n.target in _BIASED_PRODUCTS and _dtype_of(n) in _HALF \
        and _BIASED_PRODUCTS[n.target](n) is not None


def _bias_after_product(graph, n: Node) -> None:
    """`linear(x, w, b)` as `linear(x, w) + b`; `addmm(b, m1, m2, beta, alpha)` as
    `mm(m1, m2) * alpha + b * beta` (each factor only where it is not 1)."""
    bias = _BIASED_PRODUCTS[n.target](n)
    with graph.inserting_before(n):
        if n.target is _ATEN.linear.default:
            product = add_call(graph, _ATEN.linear.default, n.args[0], n.args[1])
        else:
            product = add_call(graph, _ATEN.mm.default, n.args[1], n.args[2])
            if n.kwargs.get("alpha", 1) != 1:
                product = add_call(graph, _ATEN.mul.Tensor, product, n.kwargs["alpha"])
            if n.kwargs.get("beta", 1) != 1:
                bias = add_call(graph, _ATEN.mul.Tensor, bias, n.kwargs["beta"])
        out = add_call(graph, _ATEN.add.Tensor, product, bias)
    n.replace_all_uses_with(out)
    graph.erase_node(n)


# (the calls an entry applies to, its rewrite into the form ExecuTorch computes like ATen);
# a call is rewritten by the first entry that applies to it
_FORMS = (
    (_int32_index, _index_as_int64),
    (_is_integer_remainder, _integer_remainder),
    (_zero_d_reduction, _on_one_element_view),
    (_zero_d_half_with_float, _with_float_on_one_element_view),
    (_half_accumulating, _made_in_fp32),
    (_half_attention_on_views, _row_major_args),
    (_half_biased_product, _bias_after_product),
)


def has_kernel_forms(gm: GraphModule) -> bool:
    """Whether an entry of `_FORMS` applies to a call of `gm`."""
    return any(applies(n) for n in gm.graph.nodes for applies, _ in _FORMS)


def kernel_forms(gm: GraphModule) -> None:
    """Rewrite each call of `gm` an entry of `_FORMS` applies to (module docstring)."""
    changed = False
    for n in list(gm.graph.nodes):
        rewrite = next((form for applies, form in _FORMS if applies(n)), None)
        if rewrite is not None:
            rewrite(gm.graph, n)
            changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()


def is_dense(t: torch.Tensor) -> bool:
    """Row-major strides exactly, size-1 dimensions included: ExecuTorch derives a tensor's dim
    order from its strides alone, so [1, 4, 1, 16] with strides (64, 16, 64, 1) — contiguous to
    PyTorch — is dim order (0, 2, 1, 3) to ExecuTorch, and its kernels refuse to mix it with
    tensors of the default order."""
    from torch._prims_common import make_contiguous_strides_for
    return tuple(t.stride()) == tuple(make_contiguous_strides_for(tuple(t.shape)))
