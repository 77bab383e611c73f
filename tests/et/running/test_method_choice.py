"""Any program opens, whatever its methods are called; a call names its method, or
runs the default — `forward` when the program has one, else its only method, else the call is
refused naming the methods. The same for `torch_tensorrt.load(format="executorch")` and `tte_run`.
"""
from __future__ import annotations

import copy

import pytest
import torch
from dynamic_models import PrefillCache, prefill_args, prefill_dims
from runtime_helpers import read_output, run_runner, write_steps

import torch_tensorrt_ext as tte
from torch_tensorrt_ext import reference
from torch_tensorrt_ext.errors import UsageError
from torch_tensorrt_ext.executorch.running.method_choice import NoSuchMethodError
from torch_tensorrt_ext.executorch.saving import lower

pytestmark = pytest.mark.inspects_pte


def _model():
    torch.manual_seed(0)
    return PrefillCache().eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(prefill + decode program, decode-only program): neither has a `forward`."""
    tmp, model = tmp_path_factory.mktemp("methods"), _model()
    programs = reference.export_methods({
        "prefill": (torch.export.export(copy.deepcopy(model), prefill_args(4),
                                        dynamic_shapes=prefill_dims()), None),
        "decode": (copy.deepcopy(model), prefill_args(1, 4))})
    two = lower.save_pte(programs, str(tmp / "two.pte"))
    one = lower.save_pte({"decode": programs["decode"]}, str(tmp / "one.pte"))
    return two, one


def _args(s: int):
    """Call `s` of a run: a 4-token prefill, then one-token decodes (the same values each time)."""
    g = torch.Generator().manual_seed(s)
    return prefill_args(4, generator=g) if s == 0 else prefill_args(1, 3 + s, generator=g)


def _steps(run, eager, n=3):
    """A 4-token prefill then `n` decodes through `run(args, method)`, each against eager."""
    for step in range(n + 1):
        args = _args(step)
        with torch.no_grad():
            want = eager(*copy.deepcopy(args))
        torch.testing.assert_close(run(args, "prefill" if step == 0 else "decode")[0], want,
                                   msg=lambda m: f"step {step}: {m}")


def test_a_program_without_forward_opens_and_runs_each_method_by_name(saved):
    two, _ = saved
    prog = tte.executorch.load(two)
    assert prog.method_names == {"prefill", "decode"} and prog.method_name is None
    _steps(lambda args, method: prog.run(*args, method=method), _model())


def test_a_call_naming_no_method_names_the_choices(saved):
    two, _ = saved
    prog = tte.executorch.load(two)
    with pytest.raises(UsageError) as e:
        prog.run(*prefill_args(1))
    assert str(e.value) == (f"{two} has no method 'forward' and 2 methods, ['decode', "
                            "'prefill']: name the one to run, run(*inputs, method=NAME)")
    with pytest.raises(NoSuchMethodError) as e:
        prog.run(*prefill_args(1), method="forward")
    assert str(e.value) == f"{two} has no method 'forward'; it has ['decode', 'prefill']"
    with pytest.raises(NoSuchMethodError, match=r"has no method 'nosuch'; it has \['decode'"):
        tte.executorch.load(two, method="nosuch")


def test_a_programs_only_method_is_its_default(saved):
    _, one = saved
    prog, eager = tte.executorch.load(one), _model()
    assert prog.method_name == "decode"
    for at in range(3):
        args = prefill_args(1, at)
        with torch.no_grad():
            want = eager(*copy.deepcopy(args))
        torch.testing.assert_close(prog.run(*args)[0], want)
    assert set(prog.state_traffic()) == {"k_cache"}


def test_torch_tensorrt_load_opens_it_too(saved):
    from rtx_env import torch_tensorrt_or_skip
    two, _ = saved
    prog = torch_tensorrt_or_skip().load(two, format="executorch")
    _steps(lambda args, method: prog.run(list(args), method), _model())
    with pytest.raises(UsageError, match="has no method 'forward' and 2 methods"):
        prog.run(list(prefill_args(1)))


def test_tte_run_steps_by_method_and_names_the_choices_when_none_is_given(saved, tmp_path):
    two, one = saved
    write_steps(tmp_path, _args, 3, shapes=True)
    done, _ = run_runner(two, tmp_path, 3, "none")
    assert done.returncode == 3
    assert done.stderr.strip().splitlines()[-1] == (
        f"tte_run: {two}: no --method, and the program has no method 'forward' but 2: "
        "'decode', 'prefill'; name one with --method NAME (or DIR/method.<step>)")
    done, _ = run_runner(two, tmp_path, 3, "none", "--method", "nosuch")
    assert done.stderr.strip().splitlines()[-1] == (
        f"tte_run: {two}: no method 'nosuch'; it has 'decode', 'prefill'")
    for s in range(3):
        (tmp_path / f"method.{s}").write_text("prefill" if s == 0 else "decode")
    done, _ = run_runner(two, tmp_path, 3, "none")
    assert done.returncode == 0, done.stderr
    _outputs_like_eager(tmp_path, _args, 3)


def test_tte_run_runs_a_programs_only_method_without_being_told(saved, tmp_path):
    _, one = saved
    decode = lambda s: _args(s + 1)  # noqa: E731
    write_steps(tmp_path, decode, 2)
    done, _ = run_runner(one, tmp_path, 2, "none")
    assert done.returncode == 0, done.stderr
    _outputs_like_eager(tmp_path, decode, 2)


def _outputs_like_eager(io_dir, args_of, steps: int) -> None:
    """`tte_run`'s first output of each step equals a fresh eager model stepped alike."""
    eager = _model()
    for s in range(steps):
        with torch.no_grad():
            want = eager(*args_of(s))
        torch.testing.assert_close(read_output(io_dir, s, 0, want), want)
