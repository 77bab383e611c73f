"""One stateful program through the product path, held to eager PyTorch step by step — a
generated one (stateful_grammar.Program) or a real model (model_families.ModelProgram: the same
protocol, `build`/`args`/`fqns`/`kind_of`/`torch_executed_ops`/`source`, `bufs` and `strict`):

    torch.export.export → torch_tensorrt.compile (reference engines, min_block_size=1 unless the
      program names its own)
      → the compiled module, N steps: every output and every buffer equals eager's
      → torch_tensorrt.save(output_format="executorch") → tte.executorch.load
      → the .pte, N steps: every output and `prog.state()` (every buffer by FQN) equals eager's

`check_program` returns a `Result` naming the first stage that failed (`STAGES`) with what
differed or what was raised (a compiled module that differs does not stop the .pte's check; what
the .pte did is added); a program eager or torch.export itself refuses is `invalid` (the
grammar's fault, filtered out, never a failure). Integers and bools compare exactly, floats to
1e-5 (fp32) or 1e-2 (bf16; every float of a program with bf16 state).
"""
from __future__ import annotations

import copy
import dataclasses
import re
import tempfile
import traceback
from pathlib import Path
from collections.abc import Callable, Sequence

import torch

from stateful_grammar import Program

STAGES = ("compile", "compiled_run", "compiled_mismatch", "save", "load", "pte_run",
          "pte_mismatch", "rtx_compile", "rtx_save")
# (rtol, atol); a program with bf16 state holds every float to bf16's (its rounding propagates)
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1e-2)}


@dataclasses.dataclass(frozen=True)
class Result:
    stage: str                    # "ok", "invalid", one of STAGES (or the script's "crash")
    message: str = ""
    step: int = -1
    what: str = ""                # a mismatch: "output 1" / "buffer 'm0.k' (kind)"; an error: type

    @property
    def ok(self) -> bool:
        return self.stage == "ok"

    @property
    def invalid(self) -> bool:
        return self.stage == "invalid"

    def signature(self) -> str:
        """The failure's class: the stage and what differed (a buffer by its write kind), or the
        exception's type and message with names and numbers left out."""
        if self.stage.endswith("mismatch"):
            what = re.sub(r"output [0-9]+", "output", self.what)
            return f"{self.stage}: {re.sub(r'buffer [^ ]+ ', 'buffer ', what)}"
        first = (self.message.splitlines() or [""])[0]
        first = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", first)
        return f"{self.stage}: {re.sub(r'[0-9]+', 'N', first)[:160]}"

    def report(self, program: Program | None = None) -> str:
        head = f"{self.stage}" + (f" at step {self.step}" if self.step >= 0 else "")
        text = f"{head}: {self.what}\n{self.message}"
        return text + (f"\n--- program ---\n{program.source()}" if program else "")


# refusals of valid programs once met (each fixed since): class -> a text of its message
KNOWN_REFUSALS = {
    "1 train-mode BatchNorm (broadcast_in_dim alias)": "broadcast_in_dim",
    "2 write through a transposed view (dim_order)": "Failed to map a given dim_order",
    "3 mixed-dtype nested state outputs (output order)": "not in the correct order",
    "4 engine whose only effect is an in-place write": "hands the program nothing it reads",
    "5 buffer written from torch.cond results": "from a value nothing computes in this call",
    "5 buffer written from a torch.cond result a later op overwrote": "handed on by a move) "
    "whose memory",
}
REFUSAL_STAGES = ("compile", "save", "rtx_compile", "rtx_save")


def outcome(result: Result) -> str:
    """What a program's result counts as: "passed", "invalid" (PyTorch refused it), "refused"
    (compile or save raised on a program eager and torch.export accept: a failure),
    "mismatch" (ran, differed from eager) or "error" (raised when loaded or run)."""
    if result.ok or result.invalid:
        return "passed" if result.ok else "invalid"
    if result.stage in REFUSAL_STAGES:
        return "refused"
    return "mismatch" if result.stage.endswith("mismatch") else "error"


def refusal_class(result: Result) -> str:
    """A refusal's class: one of KNOWN_REFUSALS by its message, else "new: <signature>"."""
    for name, text in KNOWN_REFUSALS.items():
        if text in result.message:
            return f"known {name}"
    return f"new: {result.signature()}"


class _Failed(Exception):
    def __init__(self, result: Result):
        super().__init__(result.message)
        self.result = result


def _error(stage: str, e: BaseException, step: int = -1) -> Result:
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if re.search(r"torch_tensorrt|executorch/", f.filename)]
    where = "".join(traceback.format_list(ours[-3:] if ours else frames[-3:]))
    inner = "".join(traceback.format_list(frames[-2:])) if ours and ours[-1] != frames[-1] else ""
    text = f"{type(e).__name__}: {e}\n{where}" + (f"  ...\n{inner}" if inner else "")
    return Result(stage, text.rstrip(), step, type(e).__name__)


def _torch_tensorrt():
    from torch_tensorrt_ext.upstream_api import torch_tensorrt_module
    return torch_tensorrt_module()


def _flat(out) -> list[torch.Tensor]:
    """Outputs as a list of fresh tensors (a returned buffer is snapshotted, not aliased)."""
    if isinstance(out, dict):
        out = list(out.values())
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    return [o.detach().clone() if isinstance(o, torch.Tensor) else torch.tensor(o) for o in outs]


def _differs(got: torch.Tensor, want: torch.Tensor, loose: bool, exact=None) -> str:
    """"" or what differs; `exact` (the fp32 model's value, for a half-precision `want`): a
    floating value is then held by `as_near_fp32_as_eager`."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{got.dtype} {list(got.shape)} where eager has {want.dtype} {list(want.shape)}"
    if want.is_floating_point() and exact is not None:
        return as_near_fp32_as_eager(got, want, exact)
    if want.is_floating_point():
        rtol, atol = TOLERANCE.get(torch.bfloat16 if loose else want.dtype, (1e-5, 1e-5))
        if torch.allclose(got.float(), want.float(), rtol=rtol, atol=atol, equal_nan=True):
            return ""
        diff = (got.float() - want.float()).abs().max().item()
        return f"max abs diff {diff:.3g}\n  got  {got.flatten()[:8].tolist()}\n  " \
               f"want {want.flatten()[:8].tolist()}"
    return "" if torch.equal(got, want) else \
        f"\n  got  {got.flatten()[:8].tolist()}\n  want {want.flatten()[:8].tolist()}"


def as_near_fp32_as_eager(got: torch.Tensor, want: torch.Tensor, exact: torch.Tensor) -> str:
    """"" when `got` (ours, half precision) is no further from `exact` (the fp32 model's) than
    twice eager's `want` (the model cast to that precision) is, plus two rounding steps of that
    precision at the value's magnitude (the engine sums in its own order: not eager's bits, as
    good an approximation); else what differs."""
    if not got.numel():
        return ""
    ours = (got.double() - exact.double()).abs().max().item()
    eagers = (want.double() - exact.double()).abs().max().item()
    step = torch.finfo(want.dtype).eps / 2 * max(1.0, exact.abs().max().item())
    if ours <= 2 * eagers + 2 * step:
        return ""
    return f"{ours:.4g} from fp32 where eager's {want.dtype} is {eagers:.4g}\n  got  " \
           f"{got.flatten()[:8].tolist()}\n  want {want.flatten()[:8].tolist()}"


def _compare(stage: str, step: int, program: Program, got: Sequence[torch.Tensor],
             want: Sequence[torch.Tensor], state: dict[str, torch.Tensor],
             want_state: dict[str, torch.Tensor]) -> None:
    # bf16 / fp16 state feeds fp32 values
    loose = any(b.dtype in ("bfloat16", "float16") for b in program.bufs)
    if len(got) != len(want):
        raise _Failed(Result(stage, f"{len(got)} outputs where eager has {len(want)}", step,
                             "output count"))
    for j, (g, w) in enumerate(zip(got, want, strict=False)):
        if why := _differs(g, w, loose):
            raise _Failed(Result(stage, f"output {j}: {why}", step, f"output {j}{_how(why)}"))
    for fqn, w in want_state.items():
        what = f"buffer '{fqn}' ({program.kind_of(fqn)})"
        if fqn not in state:
            raise _Failed(Result(stage, f"{what} is missing; have {sorted(state)}", step,
                                 f"{what} missing"))
        if why := _differs(state[fqn], w, loose):
            raise _Failed(Result(stage, f"{what}: {why}", step, what + _how(why)))


def _how(why: str) -> str:
    return " shape/dtype" if " where eager has " in why else ""


def _steps(stage: str, program: Program, run: Callable, state: Callable, want: list) -> None:
    for step, (want_out, want_state) in enumerate(want):
        try:
            with torch.no_grad():
                got = _flat(run(*program.args(step)))
            now = state()
        except Exception as e:  # noqa: BLE001 - the stage's failure, reported
            raise _Failed(_error(stage.replace("mismatch", "run"), e, step)) from e
        _compare(stage, step, program, got, want_out, now, want_state)


def _buffers(module: torch.nn.Module, fqns: Sequence[str]) -> dict[str, torch.Tensor]:
    return {f: module.get_buffer(f).detach().clone() for f in fqns}


def eager_steps(program: Program, steps: int) -> list:
    """[(outputs, {fqn: buffer}) after each step] of the eager model from its initial state."""
    model, want = program.build().eval(), []
    for step in range(steps):
        with torch.no_grad():
            out = _flat(model(*program.args(step)))
        want.append((out, _buffers(model, program.fqns())))
    return want


def check_program(program: Program, steps: int = 4, device: str | None = None,
                  rtx: bool = False, observe: Callable[[str, object], None] | None = None
                  ) -> Result:
    """`program` through export, compile, the compiled module, save, load and the .pte; the
    first stage that fails, or "ok". A compiled module that differs from eager does not stop
    the .pte's check: a .pte failure too is added to its message. `device` places the reference
    delegates' state (e.g. "cuda:0" with the emulated device in force); None:
    $TTE_REFERENCE_DEVICE or the host. `rtx`: then also compile it with TensorRT-RTX engines
    (built ahead of time) and save it: the save's verifier of the emitted program
    (`verify_writes`) must accept every state write (stage "rtx_compile" / "rtx_save").
    `observe(what, value)`, when given, sees the compiled module's plan ("plan"), the saved
    file's bytes ("pte") and, after the .pte's steps, its copied bytes per buffer ("traffic")."""
    try:
        want = eager_steps(program, steps)
        ep = _export(program)
    except Exception as e:  # noqa: BLE001 - the grammar made a program PyTorch refuses
        return dataclasses.replace(_error("invalid", e), what=f"refused: {type(e).__name__}")
    with tempfile.TemporaryDirectory(prefix="stateful-") as tmp:
        result = _check_compiled(program, ep, want, device, Path(tmp) / "program.pte",
                                 observe or (lambda what, value: None))
        if result.ok and rtx:
            ep = _export(program)
            result = _check_rtx(program, ep, Path(tmp) / "rtx.pte")
        return result


def _export(program) -> torch.export.ExportedProgram:
    """The program exported as its author would: strict where the program says so (ExecuTorch's
    llama builder exports strict), else non-strict; under `torch.no_grad()` where it says so (as
    ExecuTorch's export scripts export)."""
    with torch.set_grad_enabled(getattr(program, "grad", True)):
        return torch.export.export(program.build().eval(), program.args(0),
                                   strict=getattr(program, "strict", False))


def _check_rtx(program, ep, path) -> Result:
    from torch_tensorrt_ext.upstream_api import quiet
    torch_tensorrt, args = _torch_tensorrt(), list(program.args(0))
    with quiet():
        try:
            trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=args,
                                         min_block_size=getattr(program, "min_block_size", 1),
                                         torch_executed_ops=program.torch_executed_ops())
        except Exception as e:  # noqa: BLE001
            return _error("rtx_compile", e)
        try:
            torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=args)
        except Exception as e:  # noqa: BLE001
            return _error("rtx_save", e)
    return Result("ok")


def _check_compiled(program, ep, want, device, path, observe) -> Result:
    import torch_tensorrt_ext as tte
    from torch_tensorrt_ext.upstream_api import quiet
    torch_tensorrt, args = _torch_tensorrt(), list(program.args(0))
    with quiet(), tte.reference.engines():
        try:
            trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=args,
                                         min_block_size=getattr(program, "min_block_size", 1),
                                         torch_executed_ops=program.torch_executed_ops())
        except Exception as e:  # noqa: BLE001
            return _error("compile", e)
        observe("plan", trt.mutation_plan)
        stepped = copy.deepcopy(trt)     # `trt` is saved with its initial buffers
        module = _outcome(_steps, "compiled_mismatch", program, stepped,
                          lambda: _buffers(stepped, program.fqns()), want)
        pte = _outcome(_guarded, "save", _save, torch_tensorrt, trt, path, args, device)
    if pte.ok:
        pte = _outcome(_check_pte, tte, program, path, want, observe)
    if module.ok or pte.ok:
        return pte if module.ok else module
    also = f"\n(and the .pte: {pte.stage}" + (f" at step {pte.step}" if pte.step >= 0 else "")
    return dataclasses.replace(module, message=f"{module.message}{also}: {pte.what})")


def _check_pte(tte, program, path, want, observe) -> None:
    observe("pte", Path(path).read_bytes())
    prog = _guarded("load", tte.executorch.load, path)
    _steps("pte_mismatch", program, prog.run, prog.state, want)
    observe("traffic", prog.state_traffic())


def _outcome(check, *args) -> Result:
    try:
        check(*args)
    except _Failed as f:
        return f.result
    return Result("ok")


def _guarded(stage, fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - the stage's failure, reported
        raise _Failed(_error(stage, e)) from e


def _save(torch_tensorrt, trt, path, args, device) -> None:
    if device is None:
        torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=args)
        return
    from torch_tensorrt_ext.executorch.saving.partition import reference_device
    with reference_device(device):
        torch_tensorrt.save(trt, str(path), output_format="executorch", arg_inputs=args)


@dataclasses.dataclass(frozen=True)
class ModuleProgram:
    """A hand-written model as a `check_program` program: `factory()` builds it (seed 0),
    `args_of(step)` gives each step's inputs, `written` the buffers it writes; `host_ops` the
    ops left to PyTorch, `min_block_size` torch_tensorrt.compile's (a partition of fewer ops is
    left to PyTorch too)."""

    factory: Callable[[], torch.nn.Module]
    args_of: Callable[[int], tuple]
    written: tuple[str, ...]
    host_ops: frozenset = frozenset()
    min_block_size: int = 1
    bufs = ()                        # no bf16 state: floats compare to fp32's tolerance

    def build(self) -> torch.nn.Module:
        torch.manual_seed(0)
        return self.factory()

    def args(self, step: int) -> tuple:
        return self.args_of(step)

    def fqns(self) -> tuple[str, ...]:
        return self.written

    def kind_of(self, fqn: str) -> str:
        return "state"

    def torch_executed_ops(self) -> set:
        return set(self.host_ops)

    def source(self) -> str:
        return f"ModuleProgram({getattr(self.factory, '__name__', self.factory)!r})"
