"""One-op partitions of the ATen ops torch-tensorrt's converter registry accepts, built and run as
reference engines (seams.engine_kind.build_reference_engine), each checked against eager.

Invariant: `check(case)` returns "accepted" only when the reference engine built from the one-op
partition ran and every tensor it returned equals the op's eager result (dtype and shape exactly,
values within the dtype's tolerance); any other outcome is a refusal, with the reason as
text. A case the converter registry itself refuses (its capability validator) is "unconverted",
not counted either way. Sample inputs come from PyTorch's OpInfo database (the op's own
`sample_inputs`), and from `EXTRA` for ops OpInfo does not name; used by
scripts/converter_coverage.py and tests/engines/test_converter_coverage.py.
"""
from __future__ import annotations

import dataclasses
import itertools
import operator
import re

import torch
from torch.fx import Graph, GraphModule

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32)
MAX_SAMPLES = 2     # samples tried per (op, dtype), first ones OpInfo yields


@dataclasses.dataclass
class Case:
    """One call: the op overload, its args/kwargs (real tensors), a label naming the dtype."""
    op: torch._ops.OpOverload
    args: tuple
    kwargs: dict
    dtype: str

    @property
    def name(self) -> str:
        return f"{self.op.name()}.{self.dtype}"


def converter_ops() -> list[torch._ops.OpOverload]:
    """Every ATen OpOverload the registry names (a packet by its overloads), sorted by name."""
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import DYNAMO_CONVERTERS

    ops = set()
    for key in DYNAMO_CONVERTERS.keys():
        if isinstance(key, torch._ops.OpOverload):
            ops.add(key)
        elif isinstance(key, torch._ops.OpOverloadPacket):
            ops.update(getattr(key, o) for o in key.overloads())
    return sorted((o for o in ops if o.namespace == "aten"), key=lambda o: o.name())


def opinfos_by_name() -> dict[str, list]:
    from torch.testing._internal.common_methods_invocations import op_db

    by_name: dict[str, list] = {}
    for info in op_db:
        for name in {info.name, info.aten_name, info.name.split(".")[-1]}:
            by_name.setdefault(name, []).append(info)
    return by_name


def _base(op) -> str:
    return op._schema.name.split("::")[1]


def _fits(op, args, kwargs) -> bool:
    """Whether eager accepts this call of the overload itself (not just of its packet)."""
    try:
        op(*args, **kwargs)
    except Exception:   # noqa: BLE001  (any refusal: the sample is for another overload)
        return False
    return True


def _opinfo_calls(op, infos, dtype):
    for info in infos:
        if dtype not in info.supported_dtypes("cpu"):
            continue
        try:
            samples = list(itertools.islice(info.sample_inputs("cpu", dtype), 12))
        except Exception:   # noqa: BLE001  (a sample generator needing something we lack)
            continue
        for s in samples:
            yield (s.input, *s.args), dict(s.kwargs)


OFF_ZERO = 4.0


def _off_zero(args, kwargs) -> tuple[tuple, dict]:
    """The call with its floating tensor arguments moved off zero (+OFF_ZERO): OpInfo's samples
    are small and centred on zero, where a half-precision kernel accumulating in its own dtype,
    or subtracting near-equal sums (a variance as E[x²] - E[x]²), still looks right."""
    def shift(a):
        return a + OFF_ZERO if _is_tensor(a) and a.is_floating_point() else a
    return tuple(map(shift, args)), {k: shift(v) for k, v in kwargs.items()}


def cases(op, opinfos=None, dtypes=DTYPES) -> list[Case]:
    """Up to MAX_SAMPLES calls of `op` per dtype it takes, eager-valid for this overload; in
    bf16/fp16 also the first of them moved off zero (`_off_zero`)."""
    opinfos = opinfos_by_name() if opinfos is None else opinfos
    names = {_base(op), _base(op).lstrip("_"), re.sub(r"^_|_forward$|_kernel$", "", _base(op))}
    infos = [i for n in names for i in opinfos.get(n, ())]
    out = []
    for dtype in dtypes:
        found = [c for c in itertools.chain(_opinfo_calls(op, infos, dtype),
                                            EXTRA.get(op.name(), lambda d: ())(dtype))
                 if _fits(op, *c)]
        picked = found[:MAX_SAMPLES]
        if dtype in (torch.bfloat16, torch.float16) and found \
                and _fits(op, *(shifted := _off_zero(*found[0]))):
            picked.append(shifted)
        out += [Case(op, a, k, str(dtype).split(".")[1]) for a, k in picked]
    return out


def accepted_list(path) -> dict[str, list[str]]:
    """The checked-in accepted list: op name -> dtype labels ("float32", ...)."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            op, dtype = line.split()
            out.setdefault(op, []).append(dtype)
    return out


def overload(name: str) -> torch._ops.OpOverload:
    """`aten::add.Tensor` / `aten::addmm` as its OpOverload."""
    packet, _, over = name.split("::")[1].partition(".")
    return getattr(getattr(torch.ops.aten, packet), over or "default")


def _is_tensor(a) -> bool:
    return isinstance(a, torch.Tensor)


def one_op_partition(case: Case, first_only: bool = False
                     ) -> tuple[GraphModule, list[torch.Tensor]]:
    """A partition computing `case`'s call from its tensor arguments (placeholders, with fake
    values as the partitioner gives them), returning each tensor result (`first_only`: only
    the first, as the validators of ops like native_group_norm require)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    g, inputs = Graph(), []

    def place(a):
        if not _is_tensor(a):
            return a
        inputs.append(a)
        return g.placeholder(f"x{len(inputs) - 1}")

    args = torch.utils._pytree.tree_map(place, case.args)
    kwargs = torch.utils._pytree.tree_map(place, case.kwargs)
    node = g.call_function(case.op, args, kwargs)
    val = case.op(*case.args, **case.kwargs)
    outs = ([g.call_function(operator.getitem, (node, i)) for i, v in enumerate(val)
             if _is_tensor(v) and (i == 0 or not first_only)]
            if isinstance(val, (tuple, list)) else [node])
    g.output(tuple(outs))
    gm = GraphModule(torch.nn.Module(), g)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    FakeTensorProp(gm, mode).propagate(*[mode.from_tensor(t, static_shapes=True) for t in inputs])
    return gm, inputs


def converter_accepts(gm: GraphModule) -> bool:
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import DYNAMO_CONVERTERS

    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    return node in DYNAMO_CONVERTERS


def _same(got, want) -> str | None:
    """Why `got` is not eager's `want` (None when it is)."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"result {got.dtype}{list(got.shape)}, eager {want.dtype}{list(want.shape)}"
    try:
        torch.testing.assert_close(got, want, equal_nan=True, atol=1e-2, rtol=1e-2)
    except AssertionError as e:
        return "values differ: " + str(e).splitlines()[0]
    return None


def check(case: Case) -> tuple[str, str]:
    """("accepted" | "refused" | "unconverted" | "unsampled", reason)."""
    from torch_tensorrt_ext.seams.engine_kind import build_reference_engine

    try:
        gm, inputs = one_op_partition(case)
        first_only = not converter_accepts(gm)
        if first_only:
            gm, inputs = one_op_partition(case, first_only=True)
    except Exception as e:   # noqa: BLE001  (fake propagation fails: no partition to build)
        return "unsampled", f"no partition: {type(e).__name__}"
    if not converter_accepts(gm):
        return "unconverted", "the converter's capability validator refuses this call"
    want = [o for o in _flat(case.op(*case.args, **case.kwargs)) if _is_tensor(o)]
    want = want[:1] if first_only else want
    try:
        engine = build_reference_engine(gm)
        got = _flat(engine(*inputs))
    except Exception as e:   # noqa: BLE001  (what is measured: any refusal, by its reason)
        return "refused", f"{type(e).__name__}: {_first_line(e)}"
    bad = [r for g_, w in zip(got, want, strict=False) if (r := _same(g_, w))]
    if len(got) != len(want):
        bad.append(f"{len(got)} results, eager {len(want)}")
    if bad and len(got) == len(want) and (nearer := _nearer_exact_than_eager(case, got, want)):
        return "accepted", nearer
    return ("refused", "mismatch: " + bad[0]) if bad else ("accepted", "")


_EPS = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def _nearer_exact_than_eager(case: Case, got, want) -> str | None:
    """For a half-precision call whose results differ from eager's: a note when each result is
    as near the call made in fp32 (on the same values, widened) as eager's is, to within one
    rounding step of the dtype — eager rounds inside the op otherwise (ATen's bf16 grid sampler
    computes in bf16: 0.16 from fp32 where the engine is 0.004) — else None."""
    eps = _EPS.get(case.dtype)
    if eps is None:
        return None

    def wide(a):
        return a.float() if _is_tensor(a) and a.is_floating_point() else a
    exact = [o for o in _flat(case.op(*map(wide, case.args),
                                      **{k: wide(v) for k, v in case.kwargs.items()}))
             if _is_tensor(o)]
    errors = []
    for g_, w, e in zip(got, want, exact, strict=False):
        if g_.dtype != w.dtype or g_.shape != w.shape or e.shape != w.shape:
            return None
        ours, eagers = ((t.double() - e.double()).abs().nan_to_num(0).max().item()
                        for t in (g_, w))
        if ours > eagers + eps * max(1.0, e.abs().nan_to_num(0).max().item()):
            return None
        errors.append((ours, eagers))
    worst = max(errors, key=lambda oe: oe[0] - oe[1])
    return (f"differs from eager but is as near the fp32 call: {worst[0]:.3g} from it, eager "
            f"{worst[1]:.3g}")


def _flat(v) -> list:
    return list(v) if isinstance(v, (tuple, list)) else [v]


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else ""


def _t(shape, dtype, low=-2, high=2):
    return torch.testing.make_tensor(shape, dtype=dtype, device="cpu", low=low, high=high)


def _float_only(fn):
    return lambda d: fn(d) if d.is_floating_point else ()


# ops OpInfo has no samples for under any name (the private forms torch-tensorrt's lowering makes)
EXTRA = {
    "aten::_softmax": _float_only(lambda d: [((_t((2, 5), d), 1, False), {})]),
    "aten::_log_softmax": _float_only(lambda d: [((_t((2, 5), d), 1, False), {})]),
    "aten::native_layer_norm": _float_only(lambda d: [
        ((_t((2, 3, 4), d), [4], _t((4,), d), _t((4,), d), 1e-5), {})]),
    "aten::native_group_norm": _float_only(lambda d: [
        ((_t((2, 4, 3), d), _t((4,), d), _t((4,), d), 2, 4, 3, 2, 1e-5), {})]),
    "aten::_native_batch_norm_legit_no_training": _float_only(lambda d: [
        ((_t((2, 3, 4), d), _t((3,), d), _t((3,), d), _t((3,), d), _t((3,), d, 0.5, 2), 0.1,
          1e-5), {})]),
    "aten::_native_batch_norm_legit": _float_only(lambda d: [
        ((_t((2, 3, 4), d), _t((3,), d), _t((3,), d), False, 0.1, 1e-5), {})]),
    "aten::_to_copy": lambda d: [((_t((2, 3), d),), {"dtype": torch.float32})],
    "aten::_reshape_copy": lambda d: [((_t((2, 3), d), [3, 2]), {})],
    "aten::_prelu_kernel": _float_only(lambda d: [((_t((2, 3, 4), d), _t((3, 1), d)), {})]),
    "aten::_adaptive_avg_pool2d": _float_only(lambda d: [((_t((1, 2, 4, 4), d), [2, 2]), {})]),
    "aten::_adaptive_avg_pool3d": _float_only(lambda d: [((_t((1, 2, 4, 4, 4), d), [2, 2, 2]),
                                                          {})]),
    "aten::_pdist_forward": _float_only(lambda d: [((_t((4, 3), d), 2.0), {})]),
    "aten::_cdist_forward": _float_only(lambda d: [((_t((4, 3), d), _t((5, 3), d), 2.0, None),
                                                    {})]),
    "aten::scalar_tensor": lambda d: [((1.5,), {"dtype": d})],
    "aten::full": lambda d: [(([2, 3], 1), {"dtype": d})],
    "aten::arange": lambda d: [((5,), {"dtype": d})],
    "aten::embedding": lambda d: [((_t((10, 3), d), torch.tensor([[1, 2], [4, 9]])), {})],
}
