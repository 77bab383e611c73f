"""The device cases: every program the runner (`tte_run`) steps with its state in device memory —
on the emulated device in CPU CI (tests/runtime/test_device_runner.py), on a GPU in the GPU tier
(tests/gpu/test_device_path.py, on the spot or from scripts/device_bundle.py's bundle).

Invariant: a case is ONE entry of `DEVICE_CASES` (name -> `DeviceCase`): its model, its methods
and what each step calls. Everything else — the `.pte` saved with reference engines and state on
`cuda:0`, the inputs, eager's outputs, the bytes the delegates must copy — is derived from that
entry by `write_case`, in the form `tte_run` and `device_outputs` read (a case folder):

    m.pte  in.<s>.<i>.bin [in.<s>.<i>.shape]  method.<s>  want.<s>.<j>.bin  expect.json

Several methods share the model's state, as in an app: step s of the eager copy calls the same
method on the same module, so its buffers carry over between methods exactly as the program's do.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from runtime_helpers import write_steps

from torch_tensorrt_ext.contracts.dtypes import DTYPE_NAMES


def itself(model: torch.nn.Module) -> torch.nn.Module:
    return model


def method_of(name: str) -> Callable[[torch.nn.Module], torch.nn.Module]:
    """`methods` entry for a method of the model other than its forward (`model.<name>`): a
    shallow copy of the model whose forward is that method — the same parameters and buffers
    under the same names, so every method of the program shares the model's state by FQN."""
    def view(model: torch.nn.Module) -> torch.nn.Module:
        module = copy.copy(model)
        module.forward = getattr(model, name)
        return module
    return view


@dataclass(frozen=True)
class DeviceCase:
    """One program stepped on the device.

    model: a factory of the eager model (its buffers get random values: `random_state`);
    step: step s -> (method name, input tensors);
    methods: method name -> the module whose forward is that method (default: `forward`, the
        model itself; `method_of("encode")` for `model.encode`); every method is exported from
        the same model and saved in one program, sharing its state by FQN;
    dynamic: method name -> the `dynamic_shapes` it is exported with (its inputs' shapes then
        travel per step as in.<s>.<i>.shape);
    example: method name -> the inputs it is exported with (default: its first step's);
    strict: torch.export's mode for the dynamic methods (a model writing buffers through another
        object holding them is exported strict, as its authors do).
    """

    model: Callable[[], torch.nn.Module]
    step: Callable[[int], tuple[str, tuple]]
    methods: Mapping[str, Callable[[torch.nn.Module], torch.nn.Module]] = field(
        default_factory=lambda: {"forward": itself})
    dynamic: Mapping[str, object] = field(default_factory=dict)
    example: Mapping[str, tuple] = field(default_factory=dict)
    strict: bool = False

    def method(self, s: int) -> str:
        return self.step(s)[0]

    def args(self, s: int) -> tuple:
        return self.step(s)[1]

    def call_eager(self, eager: torch.nn.Module, s: int):
        method, args = self.step(s)
        with torch.no_grad():
            return self.methods[method](eager)(*args)


def _forward(args_of):
    return lambda s: ("forward", args_of(s))


# --------------------------------------------------------------------------------- the cases

# the dynamic-length case: a prompt length per step (their sum fits the 16-position cache)
PREFILL_LENGTHS = (4, 1, 3, 1, 2, 1, 2, 1)


def _prefill_args(step: int):
    from dynamic_models import prefill_args
    start = sum(PREFILL_LENGTHS[:step % len(PREFILL_LENGTHS)])
    return prefill_args(PREFILL_LENGTHS[step % len(PREFILL_LENGTHS)], start,
                        generator=torch.Generator().manual_seed(step))


# the two-method case: a 4-token prefill, then one-token decodes, on one cache (`shared_arenas`)
PREFILL_THEN_DECODE = "prefill_decode_shared"


def _prefill_then_decode(step: int):
    from dynamic_models import prefill_args
    g = torch.Generator().manual_seed(step)
    if step == 0:
        return "prefill", prefill_args(4, 0, generator=g)
    return "decode", prefill_args(1, 3 + step, generator=g)


# three methods: a 4-token prefill, then decodes with the stateless encoder between them
PREFILL_DECODE_ENCODE = "prefill_decode_encode"


def _prefill_decode_encode(step: int):
    from dynamic_models import prefill_args
    g = torch.Generator().manual_seed(step)
    if step == 0:
        return "prefill", prefill_args(4, 0, generator=g)
    if step % 2:
        return "encode", (torch.randn(1, 8, generator=g),)
    return "decode", prefill_args(1, 3 + step // 2, generator=g)


# Whisper's shape: `fill` writes the cross state (steps 0 and 4), decodes only read it
WHISPER_SHAPED = "whisper_shaped"


def _fill_then_decode(step: int):
    from dynamic_models import prefill_args
    g = torch.Generator().manual_seed(step)
    if step % 4 == 0:
        return "fill", (torch.randn(1, 8, generator=g),)
    return "decode", prefill_args(1, step, generator=g)


def _demo_step(s: int):
    return "forward", (torch.randn(1, 1, 16, generator=torch.Generator().manual_seed(s)),
                       torch.tensor([s]))


def _cases() -> dict[str, DeviceCase]:
    """Every end-to-end model (tests/support/e2e_models.py), the demo decoder, a prefill whose
    length changes every step, prefill + decode as two methods of one program, prefill + decode
    + a stateless encoder called between decode steps, and Whisper's shape (a `fill` writing the
    cross state that decode steps only read).

    To add a case, add one entry here (a multi-method one names its `methods` and, per step,
    which method it calls); the emulated-device test, the bundle and the GPU tier pick it up."""
    from dynamic_models import CrossDecoder, PrefillCache, PrefillDecodeEncode, prefill_dims
    from e2e_models import MODELS
    from torch_tensorrt_ext.demo.models import Decoder
    cases = {name: DeviceCase(factory, _forward(args_of))
             for name, (factory, args_of, _) in MODELS.items()}
    cases["demo_decoder"] = DeviceCase(lambda: Decoder(layers=2), _demo_step)
    cases["prefill_dynamic"] = DeviceCase(PrefillCache, _forward(_prefill_args),
                                          dynamic={"forward": prefill_dims()})
    cases[PREFILL_THEN_DECODE] = DeviceCase(
        PrefillCache, _prefill_then_decode, methods={"prefill": itself, "decode": itself},
        dynamic={"prefill": prefill_dims()})
    cases[PREFILL_DECODE_ENCODE] = DeviceCase(
        PrefillDecodeEncode, _prefill_decode_encode,
        methods={"prefill": itself, "decode": itself, "encode": method_of("encode")},
        dynamic={"prefill": prefill_dims()})
    cases[WHISPER_SHAPED] = DeviceCase(
        CrossDecoder, _fill_then_decode, methods={"fill": method_of("fill"), "decode": itself})
    return cases


DEVICE_CASES: dict[str, DeviceCase] = _cases()


# ------------------------------------------------------------------------- writing a case

def random_state(model: torch.nn.Module) -> torch.nn.Module:
    """Non-zero initial values, so a lost or host-written initial value shows in the outputs."""
    torch.manual_seed(1)
    for b in model.buffers():
        if b.is_floating_point():
            b.normal_()
    return model


def _first_args(case: DeviceCase, method: str, steps: int = 64) -> tuple:
    """What `method` is exported with: its `example`, else the inputs of its first step."""
    if method in case.example:
        return case.example[method]
    return next(case.args(s) for s in range(steps) if case.method(s) == method)


def _exported(case: DeviceCase, model: torch.nn.Module, method: str):
    """`method` of `model` as a module, or as an ExportedProgram where it has dynamic shapes."""
    view = case.methods[method](copy.deepcopy(model))
    dims = case.dynamic.get(method)
    return view if dims is None else torch.export.export(view, _first_args(case, method),
                                                         dynamic_shapes=dims, strict=case.strict)


def save_case(io_dir: Path, name: str, steps: int):
    """Case `name` saved with reference engines and its state on `cuda:0` as io_dir/m.pte, with
    the inputs of `steps` calls and each step's method: (eager model, plan or None, .pte bytes).
    The plan is the one method's; a program of several methods has none."""
    from torch_tensorrt_ext import reference
    from torch_tensorrt_ext.executorch.saving import lower
    case = DEVICE_CASES[name]
    model = random_state(case.model().eval())
    eager = copy.deepcopy(model)
    plan = None
    if list(case.methods) == ["forward"]:
        ep, compiled = reference.export_program(_exported(case, model, "forward"),
                                                _first_args(case, "forward"))
        programs, plan = ep, compiled.plan
    else:
        programs = reference.export_methods({
            m: (_exported(case, model, m), _first_args(case, m)) for m in case.methods})
    data = bytes(lower.to_executorch(programs, device="cuda:0").buffer)
    io_dir.mkdir(parents=True, exist_ok=True)
    (io_dir / "m.pte").write_bytes(data)
    write_steps(io_dir, case.args, steps, shapes=bool(case.dynamic))
    for s in range(steps):
        (io_dir / f"method.{s}").write_text(case.method(s))
    return eager, plan, data


def raw(t: torch.Tensor) -> bytes:
    """A tensor's bytes as `tte_run` reads and writes them (any dtype, bf16 included)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def delegate_copies_over_steps(pte, name: str, steps: int) -> dict[str, int]:
    """FQN -> the bytes the delegates copy into it over `steps` calls of case `name`: the sum of
    each step's method's `delegate_copy_bytes` (what its blobs say their delegate copies back)."""
    from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
    info = inspect_pte(Path(pte).read_bytes())
    total: dict[str, int] = {}
    for s in range(steps):
        for b in info.method(DEVICE_CASES[name].method(s)).buffers:
            total[b.fqn] = total.get(b.fqn, 0) + b.delegate_copy_bytes
    return total


def _expected_copies(eager, plan, pte: Path, name: str, steps: int) -> dict[str, int]:
    """The bytes the delegate must copy per buffer over the run: from the plan (KV 0, an
    engine-copied buffer its size per call) or, for several methods, from each step's blobs."""
    from torch_tensorrt_ext.contracts.plan import Copier
    if plan is None:
        return delegate_copies_over_steps(pte, name, steps)
    expect = {}
    for w in plan:
        b = eager.get_buffer(w.fqn)
        copied = w.copier is Copier.ENGINE and not w.is_kv
        expect[w.fqn] = steps * b.numel() * b.element_size() if copied else 0
    return expect


def write_case(io_dir: Path, name: str, steps: int) -> None:
    """Case `name` as a case folder (the module docstring): `save_case`, eager's outputs as raw
    bytes (want.<s>.<j>.bin) and expect.json — the steps, each output's dtype and shape per step,
    and the bytes the delegate must copy per buffer."""
    eager, plan, _ = save_case(io_dir, name, steps)
    case = DEVICE_CASES[name]
    outputs = []
    for s in range(steps):
        want = case.call_eager(eager, s)
        want = want if isinstance(want, (tuple, list)) else (want,)
        outputs.append([{"dtype": DTYPE_NAMES[w.dtype], "shape": list(w.shape)} for w in want])
        for j, w in enumerate(want):
            (io_dir / f"want.{s}.{j}.bin").write_bytes(raw(w))
    expect = {"steps": steps, "outputs": outputs,
              "copy_bytes": _expected_copies(eager, plan, io_dir / "m.pte", name, steps)}
    (io_dir / "expect.json").write_text(json.dumps(expect))
