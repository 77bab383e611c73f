"""A program of several methods (method_grammar.MethodsProgram) through one multi-method save path,
held to eager PyTorch call by call:

    torch.export.export of each method (one module: the buffers' FQNs are the same in each)
      → the program's save path: `tte.reference.export({...})` ("reference"), each method through
        `torch_tensorrt.compile` then `torch_tensorrt.executorch.export({...})` ("upstream"), or
        ExecuTorch's export API with the TensorRT recipe and a dict of methods ("recipe"); all on
        reference engines, weights in the `.pte` or (`external`) in a `.ptd`
      → `tte.executorch.load` → the drawn interleaving of calls and `reset()`: after every call the
        call's outputs and every buffer (`prog.state()`, by FQN) equal eager's — for a
        half-precision recipe (fp16 / bf16), eager's being the model cast as `model.to(dtype)`: a
        floating value then is as near the fp32 model's as eager's (`as_near_fp32_as_eager`), an
        integer equal

`check_methods` returns a `stateful_check.Result` naming the first stage that failed (`export` is
PyTorch refusing the program: `invalid`, the grammar's fault).

A real model's methods (exported by their authors' helpers, inputs possibly keyword arguments) go
through the same savers as a `ModelMethods` (`save(methods, path)`); `step_like_eager` then holds
the loaded program to an eager copy over a given interleaving of calls.
"""
from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Callable
import warnings
from pathlib import Path

import torch

from method_grammar import EXAMPLE_T, MethodsProgram
from stateful_check import Result, _differs, _error, _flat, _torch_tensorrt


class _Failed(Exception):
    def __init__(self, result: Result):
        super().__init__(result.message)
        self.result = result


def eager_calls(program: MethodsProgram, dtype: torch.dtype | None = None) -> list:
    """[(method or "reset", outputs, {fqn: buffer})] for each scheduled call, from a fresh model
    cast to `dtype` (default: the program's precision; float32: the model as built, half-precision
    buffers included), inputs in that dtype; a call the `.pte` refuses (`program.refused`): outputs
    None, eager not called."""
    dtype = dtype or program.dtype
    model = program.build().eval()
    if dtype != torch.float32:     # the recipe's cast; an fp32 program keeps its bf16 buffers
        model = model.to(dtype)
    initial = {n: b.detach().clone() for n, b in model.named_buffers()}
    out = []
    for i, (name, tokens, start) in enumerate(program.schedule()):
        if name == "reset":
            for n, b in model.named_buffers():
                b.copy_(initial[n])
            out.append((name, [], {}))
            continue
        if program.refused(name, tokens):
            got = None
        else:
            with torch.no_grad():
                got = _flat(getattr(model, name)(*program.call_args(i, name, tokens, start,
                                                                    dtype)))
        out.append((name, got, {f: model.get_buffer(f[2:]).detach().clone()
                                for f in program.fqns()}))
    return out


def _exported(program: MethodsProgram) -> dict[str, torch.export.ExportedProgram]:
    model = program.build().eval()
    with torch.set_grad_enabled(program.grad):
        return {n: torch.export.export(program.method_module(model, n), program.example_args(n),
                                       dynamic_shapes=program.dynamic_shapes(n),
                                       strict=program.strict)
                for n in program.names()}


def _each_method_runs(program: MethodsProgram) -> None:
    """Each method called once, eagerly, in the program's precision (a half-precision recipe's
    cast model): a method PyTorch cannot run there — one the schedule never calls included, such
    as a float16 buffer's `scatter_add_` of a float32 sum — makes the program invalid, as
    `_exported` makes one it cannot trace (it traces the float32 model)."""
    if program.dtype == torch.float32:
        return
    model = program.build().eval().to(program.dtype)
    with torch.no_grad():
        for name in program.names():
            getattr(model, name)(*program.call_args(0, name, EXAMPLE_T.get(name, 1), 0))


def _modules(program) -> dict[str, torch.nn.Module]:
    """Each method as a module called positionally (what ExecuTorch's export API takes)."""
    if isinstance(program, ModelMethods):
        return dict(program.modules)
    model = program.build().eval()
    return {n: program.method_module(model, n) for n in program.names()}


def _kwargs(program, name: str) -> dict:
    return program.example_kwargs(name) if isinstance(program, ModelMethods) else {}


@dataclasses.dataclass
class ModelMethods:
    """A real model's methods as the multi-method save paths take them (the same protocol as a
    `MethodsProgram`): `eps` each method exported as its authors export it (e.g. transformers'
    `.export(input_ids=..., cache_position=..., dynamic_shapes=...)`, whose inputs are keyword
    arguments), `args`/`kwargs` the inputs each was exported with, `dims` its dynamic shapes;
    `modules` each method as a module called positionally with `args` then `kwargs`' values
    (ExecuTorch's export API, the "recipe" path, exports them itself: there `eps` may hold
    None); None: no recipe."""

    eps: dict[str, torch.export.ExportedProgram | None]
    args: dict[str, tuple]
    kwargs: dict[str, dict] = dataclasses.field(default_factory=dict)
    dims: dict[str, object] = dataclasses.field(default_factory=dict)
    modules: dict[str, torch.nn.Module] | None = None
    path: str = "reference"
    external: bool = False
    strict: bool | None = None    # the recipe path's torch.export mode (None: the recipe's)

    def names(self) -> list[str]:
        return list(self.eps)

    def example_args(self, name: str) -> tuple:
        return tuple(self.args.get(name, ()))

    def example_kwargs(self, name: str) -> dict:
        return dict(self.kwargs.get(name, {}))

    def dynamic_shapes(self, name: str):
        return self.dims.get(name)

    def positional(self, name: str) -> tuple:
        return self.example_args(name) + tuple(self.example_kwargs(name).values())


def _save_reference(program, eps, path: Path) -> None:
    import torch_tensorrt_ext as tte
    tte.reference.export({n: (ep, None) for n, ep in eps.items()}, str(path))


def _save_upstream(program, eps, path: Path) -> None:
    import torch_tensorrt_ext as tte
    import torch_tensorrt_ext.executorch  # noqa: F401  (the stateful lowering is patched in)
    torch_tensorrt = _torch_tensorrt()
    import torch_tensorrt.executorch  # noqa: F401, F811
    programs = {}
    with tte.reference.engines():
        for n, ep in eps.items():
            args, kwargs = list(program.example_args(n)), _kwargs(program, n)
            gm = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=args, kwarg_inputs=kwargs,
                                        min_block_size=1)
            dims = program.dynamic_shapes(n) if getattr(program, "save_dims", True) else None
            programs[n] = torch_tensorrt.dynamo.export(gm, arg_inputs=args, kwarg_inputs=kwargs,
                                                       dynamic_shapes=dims)
    et = torch_tensorrt.executorch.export(programs).to_executorch()
    path.write_bytes(et.buffer)
    et.write_tensor_data_to_file(str(path.parent))


def _save_recipe(program, eps, path: Path) -> None:
    import torch_tensorrt_ext as tte
    from executorch.export import ExportRecipe, export
    from torch_tensorrt_ext.recipes import DTYPES
    dims = {n: program.dynamic_shapes(n) for n in program.names() if program.dynamic_shapes(n)}
    dtype = getattr(program, "dtype", torch.float32)
    positional = getattr(program, "positional", program.example_args)
    with tte.reference.engines():
        session = export(_modules(program), {n: [positional(n)] for n in program.names()},
                         export_recipe=ExportRecipe.get_recipe(
                             next(r for r, d in DTYPES.items() if d == dtype),
                             **_strict(program)),
                         dynamic_shapes=dims or None)
    # ExecuTorch 1.5.1's save_to_pte writes the .ptd (weights saved externally) into the
    # working directory, not beside the .pte: saved from the .pte's folder, as a user would
    with contextlib.chdir(path.parent):
        session.save_to_pte(path.name)


def _strict(program) -> dict:
    strict = getattr(program, "strict", None)
    return {} if strict is None else {"strict": strict}


SAVERS = {"reference": _save_reference, "upstream": _save_upstream, "recipe": _save_recipe}


def save(program: MethodsProgram, path: Path, eps=None) -> None:
    """`program` saved at `path` through its save path (`eps`: its methods exported)."""

    import torch_tensorrt_ext as tte
    from torch_tensorrt_ext.upstream_api import quiet
    external = tte.executorch.save_data_externally(path.stem) if program.external \
        else contextlib.nullcontext()
    with quiet(), external, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if eps is None:
            eps = program.eps if isinstance(program, ModelMethods) else _exported(program)
        SAVERS[program.path](program, eps, path)


def step_like_eager(prog, eager: torch.nn.Module, call: Callable, calls: list,
                    tol: float = 1e-5) -> None:
    """`prog` (a loaded program of several methods) and `eager` (a copy of the module whose
    buffers are the program's state, in its initial state) called alike, in order, for each
    `(method, args)` of `calls`: `call(method, args)` runs `method` eagerly (on `eager`);
    `("reset", ())` resets both (`prog.reset()`; eager's buffers back to their initial values).
    After every call the outputs, and every buffer of `prog.state()` by FQN, equal eager's;
    every buffer eager has changed so far must be in the state."""
    initial = {n: b.detach().clone() for n, b in eager.named_buffers()}
    for i, (name, args) in enumerate(calls):
        if name == "reset":
            prog.reset()
            for n, b in eager.named_buffers():
                b.copy_(initial[n])
            continue
        with torch.no_grad():
            want = _flat(call(name, args))
            got = _flat(prog.run(*args, method=name))
        where = f"call {i} ({name})"
        assert len(got) == len(want), f"{where}: {len(got)} outputs where eager has {len(want)}"
        for j, (g, w) in enumerate(zip(got, want, strict=True)):
            torch.testing.assert_close(g, w, rtol=tol, atol=tol,
                                       msg=lambda m, j=j: f"{where} output {j}: {m}")
        state = prog.state()
        changed = {n for n, b in eager.named_buffers() if not torch.equal(b, initial[n])}
        assert changed <= set(state), f"{where}: state lacks {sorted(changed - set(state))}"
        for fqn, value in state.items():
            torch.testing.assert_close(value, eager.get_buffer(fqn), rtol=tol, atol=tol,
                                       msg=lambda m, f=fqn: f"{where} buffer {f!r}: {m}")


def _step(program: MethodsProgram, prog, want: list, exact: list | None = None) -> None:
    """Call the loaded program as scheduled, each call's outputs and state held to `want`'s (and,
    for half precision, to `exact`'s, the fp32 model's)."""
    exact, loose = exact or [None] * len(want), program.loose
    for i, ((name, tokens, start), (_, want_out, want_state), fp32) in enumerate(
            zip(program.schedule(), want, exact, strict=True)):
        exact_out, exact_state = (fp32[1], fp32[2]) if fp32 else ([None] * len(want_out or ()),
                                                                  {})
        try:
            if name == "reset":
                prog.reset()
                continue
            if want_out is None:
                _refused(prog, program, i, name, tokens, start)
                got, want_out = [], []
            else:
                with torch.no_grad():
                    got = _flat(prog.run(*program.call_args(i, name, tokens, start),
                                         method=name))
            state = prog.state()
        except _Failed:
            raise
        except Exception as e:  # noqa: BLE001 - the stage's failure, reported
            raise _Failed(dataclasses.replace(_error("pte_run", e, i), what=f"{name}: "
                                              f"{type(e).__name__}")) from e
        for j, (g, w, e) in enumerate(zip(got, want_out, exact_out, strict=False)):
            if why := _differs(g, w, loose, e):
                raise _Failed(Result("pte_mismatch", f"call {i} ({name}) output {j}: {why}", i,
                                     f"{name} output"))
        for fqn, w in want_state.items():
            if fqn not in state:
                raise _Failed(Result("pte_mismatch", f"call {i} ({name}): buffer {fqn!r} is "
                                     f"missing; have {sorted(state)}", i, f"{fqn} missing"))
            if why := _differs(state[fqn], w, loose, exact_state.get(fqn)):
                raise _Failed(Result("pte_mismatch", f"call {i} ({name}): buffer {fqn!r}: {why}",
                                     i, f"{name}: buffer {program.kind_of(fqn)}"))


def _refused(prog, program: MethodsProgram, i: int, name: str, tokens: int, start: int) -> None:
    """Call i, which the `.pte` must refuse before anything runs (`program.refused`)."""
    from torch_tensorrt_ext.executorch.running.method_inputs import InputShapeError
    try:
        with torch.no_grad():
            prog.run(*program.call_args(i, name, tokens, start), method=name)
    except InputShapeError:
        return
    raise _Failed(Result("pte_mismatch", f"call {i} ({name}) ran at {tokens} tokens; saved "
                         f"without its dynamic dims, the program takes "
                         f"{program.example_args(name)[0].shape[1]}", i, f"{name}: not refused"))


def check_methods(program: MethodsProgram, device: str | None = None) -> Result:
    """`program` through its save path, loaded and stepped: the first stage that failed, or
    "ok". `device` places the reference delegates' state (e.g. "cuda:0" with the emulated
    device in force)."""
    import torch_tensorrt_ext as tte
    try:
        want = eager_calls(program)
        exact = eager_calls(program, torch.float32) if program.precision != "fp32" else None
        eps = _exported(program)
        _each_method_runs(program)
    except Exception as e:  # noqa: BLE001 - the grammar made a program PyTorch refuses
        return dataclasses.replace(_error("invalid", e), what=f"refused: {type(e).__name__}")
    with tempfile.TemporaryDirectory(prefix="methods-") as tmp:
        path = Path(tmp) / "program.pte"
        try:
            with _reference_device(device):
                save(program, path, eps)
        except Exception as e:  # noqa: BLE001
            return _error("save", e)
        data = path.with_suffix(".ptd")
        if program.external and (inside := _weights_in_pte(path)):
            return Result("save", f"weights {inside} stayed in the .pte: they were asked for in "
                          "a data file", what="data file")
        try:
            prog = tte.executorch.load(path, data_files=str(data) if data.exists() else None)
        except Exception as e:  # noqa: BLE001
            return _error("load", e)
        try:
            _step(program, prog, want, exact)
        except _Failed as f:
            return f.result
    return Result("ok")


def _weights_in_pte(path: Path) -> list[str]:
    """The named-data keys of engine weights `path` holds itself (`inspect_pte`'s record)."""
    from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
    info = inspect_pte(path.read_bytes())
    return [key for m in info.methods for d in m.delegates for key, _, in_pte in d.weights
            if in_pte]


def _reference_device(device):
    if device is None:
        return contextlib.nullcontext()
    from torch_tensorrt_ext.executorch.saving.partition import reference_device
    return reference_device(device)




def saved_and_loaded(methods, tmp_path: Path):
    """`methods` saved as `tmp_path/program.pte` (and its `.ptd` when the path writes one) and
    loaded with the package's loader."""
    import torch_tensorrt_ext as tte
    path = tmp_path / "program.pte"
    save(methods, path)
    data = path.with_suffix(".ptd")
    return tte.executorch.load(path, data_files=str(data) if data.exists() else None)


def saver_params() -> list:
    """Every multi-method save path as pytest params: the recipe's (ExecuTorch's export API)
    saves take longest (`slow`); the reference path's also runs with the state on the emulated
    device (`emulated_device`)."""
    import pytest
    marks = {"recipe": [pytest.mark.slow], "reference": [pytest.mark.emulated_device]}
    return [pytest.param(p, marks=marks.get(p, [])) for p in SAVERS]


def save_like_an_earlier_release(monkeypatch, program: MethodsProgram, path: Path) -> None:
    """Save `program` with each method's state left in its own activation arena, which loaders
    share across methods — as earlier releases did for a program none of whose written buffers
    another method takes (a decode beside a stateless encoder) — and no whole-program check."""
    from torch_tensorrt_ext.executorch.saving import config
    monkeypatch.setattr(config, "shares_state", lambda mutated: False)
    monkeypatch.setattr(config, "check_program_state", lambda *a, **k: None)
    save(program, path)
    monkeypatch.undo()


__all__ = ["SAVERS", "ModelMethods", "check_methods", "eager_calls", "save",
           "save_like_an_earlier_release", "saved_and_loaded", "saver_params", "step_like_eager"]
