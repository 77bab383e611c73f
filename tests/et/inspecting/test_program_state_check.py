"""The whole-program check (`executorch.inspecting.program_state`): a saved program's methods hold
one state — each buffer any method writes one allocation in every method that takes it, with one
dtype, shape and initial value, no method's planned memory on another's state, no method reading
as a constant what another writes — read from the emitted program alone. The save refuses a
violation naming the buffer and both methods; `inspect` reports it in a file an earlier release
wrote, and the loader then gives each method its own arenas and says so once.
"""
from __future__ import annotations

import copy
import re
import subprocess
import warnings

import pytest
import torch

import torch_tensorrt_ext as tte
from helpers import REPO
from method_check import (SAVERS, ModelMethods, save, save_like_an_earlier_release,
                          saver_params)
from method_grammar import Method, MethodsProgram, State
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
from torch_tensorrt_ext.executorch.inspecting.program_state import (ProgramStateError,
                                                                     state_faults)

pytestmark = [pytest.mark.inspects_pte]

# a decode whose state no other method takes, beside a stateless encoder (a VLM's layout)
DECODE_AND_ENCODE = MethodsProgram(
    states=(State("kv"), State("counter")),
    methods=(Method("decode", ("kv", "counter"), ("kv", "counter")), Method("encode")),
    calls=(("decode", 1), ("encode", 1), ("decode", 1), ("encode", 1), ("decode", 1)))

OVERWRITTEN = re.compile(r"buffer 'm\.(kv|counter)' \(state of method 'decode', arena 1 offset "
                         r"\d+, \d+ bytes\) lies where method 'encode' plans a tensor of its own "
                         r"\(value \d+\) \(arena 1 offset \d+, \d+ bytes\): calling 'encode' "
                         r"would overwrite 'm\.(kv|counter)'")


def test_state_left_where_another_method_plans_is_refused_at_save(tmp_path, monkeypatch):
    """With state left in each method's activation arena (the protection, `shares_state`, off),
    the save refuses naming the buffer and both methods — it would have written a program whose
    encoder overwrites the decoder's cache."""
    from torch_tensorrt_ext.executorch.saving import config
    monkeypatch.setattr(config, "shares_state", lambda mutated: False)
    with pytest.raises(ProgramStateError, match=OVERWRITTEN.pattern):
        save(DECODE_AND_ENCODE, tmp_path / "p.pte")
    assert not (tmp_path / "p.pte").exists()


# every fault the check names, each drawn where it arises once sharing is off: prefill and decode
# write `kv` (each at its own place: (a)), a stateless encoder plans over it ((c)), decode reads
# `cross`, which fill writes, as a constant ((d))
EVERY_FAULT = MethodsProgram(
    states=(State("kv"), State("cross")),
    methods=(Method("prefill", ("kv",), ("kv",)), Method("decode", ("kv",), ("kv", "cross")),
             Method("fill", ("cross",)), Method("encode")),
    calls=())
NOT_ONE_ALLOCATION = re.compile(r"buffer 'm\.kv' is not one allocation: method '(decode|prefill)' "
                                r"holds it at arena 1 offset \d+, method '(decode|prefill)' at "
                                r"arena 1 offset \d+; a write by one method would not be seen by "
                                r"the other")
OVER_STATE = re.compile(r"buffer 'm\.kv' \(state of method 'decode', arena 1 offset \d+, \d+ "
                        r"bytes\) lies where method 'encode' plans a tensor of its own .*")
AS_A_CONSTANT = ("method 'decode' reads buffer 'm.cross' as a constant (its initial value, frozen "
                 "at save) while method 'fill' writes it: 'decode' would never see the writes. "
                 "Every method must take a mutated buffer as state")


# the arenas the messages name are the host's (the device's own fault: test_shared_arenas.py)
HOST_PATHS = [pytest.param(p, marks=[pytest.mark.slow] if p == "recipe" else []) for p in SAVERS]


@pytest.mark.parametrize("path_kind", HOST_PATHS)
def test_with_state_left_to_each_method_every_save_path_refuses_each_fault(tmp_path, monkeypatch,
                                                                          path_kind):
    """The protection (`shares_state`: state in memory of its own, one allocation every method
    shares) switched off: the save refuses, and the check has found each kind of fault — naming
    the buffer and both methods — and no use a method does not make (`fill` never touches
    `kv`)."""
    from torch_tensorrt_ext.executorch.saving import config
    monkeypatch.setattr(config, "shares_state", lambda mutated: False)
    path = tmp_path / "p.pte"
    program = MethodsProgram(EVERY_FAULT.states, EVERY_FAULT.methods, (), path_kind)
    with pytest.raises(ProgramStateError) as refused:
        save(program, path)
    texts = [f.text for f in refused.value.faults]
    assert str(refused.value) == f"{texts[0]} ({len(texts) - 1} more)"
    assert any(NOT_ONE_ALLOCATION.fullmatch(t) for t in texts), texts
    assert any(OVER_STATE.fullmatch(t) for t in texts), texts
    assert AS_A_CONSTANT in texts
    assert not [t for t in texts if "as a constant" in t and t != AS_A_CONSTANT], texts
    assert not path.exists()


class Rows(torch.nn.Module):
    def __init__(self, rows, dtype=torch.float32):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("k", torch.zeros(rows, 8, dtype=dtype))

    def forward(self, x):
        self.k.add_(self.lin(x).to(self.k.dtype))
        return self.k.sum(0).float()


@pytest.mark.parametrize("path_kind", saver_params())
@pytest.mark.parametrize("b,seen", [(Rows(2), "float32 [2, 8]"),
                                    (Rows(4, torch.float16), "float16 [4, 8]")],
                         ids=["shape", "dtype"])
def test_methods_that_disagree_about_a_buffer_are_refused_naming_both(tmp_path, path_kind, b,
                                                                       seen):
    x = torch.randn(1, 8)
    modules = {"a": Rows(4).eval(), "b": copy.deepcopy(b).eval()}
    eps = {n: None if path_kind == "recipe" else torch.export.export(m, (x,))
           for n, m in modules.items()}
    path = tmp_path / "p.pte"
    with pytest.raises(ProgramStateError, match=re.escape(
            f"methods 'a' and 'b' disagree about buffer 'k': float32 [4, 8] in 'a', {seen} in "
            "'b'; one buffer has one dtype and shape in every method")):
        save(ModelMethods(eps, {n: (x,) for n in modules}, modules=modules, path=path_kind),
             path)
    assert not path.exists()


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("count", torch.zeros(2, 8))

    def forward(self, x):
        self.count.add_(1.0)
        return self.lin(x) + self.count


@pytest.mark.parametrize("path_kind", saver_params())
def test_methods_exported_from_a_module_in_different_states_are_refused_naming_both(
        tmp_path, path_kind):
    """`a` exported from a copy of the module as built, `b` from a copy after five calls: each
    method's load writes its own initial `count`, so the program would start from whichever
    loads last — refused, naming the buffer, both methods and how the values differ; exported
    from one module in one state, the same methods save."""
    x = torch.randn(1, 8)
    model = Counter().eval()
    fresh = copy.deepcopy(model)
    with torch.no_grad():
        for _ in range(5):
            model(x)
    path = tmp_path / "p.pte"

    def methods(a, b):
        modules = {"a": a, "b": b}
        eps = {n: None if path_kind == "recipe" else torch.export.export(m, (x,))
               for n, m in modules.items()}
        return ModelMethods(eps, {n: (x,) for n in modules}, modules=modules, path=path_kind)

    with pytest.raises(ProgramStateError, match=re.escape(
            "methods 'a' and 'b' hold different initial values of buffer 'count' (16 of 16 "
            "float32 elements differ, the first at element 0): loading a method writes its "
            "initial value into the buffer, so the program would start from whichever method "
            "loads last. Export every method from the module in one state")):
        save(methods(fresh, copy.deepcopy(model)), path)
    assert not path.exists()
    save(methods(fresh, fresh), path)
    assert inspect_pte(path.read_bytes()).state_faults == ()


def test_a_method_reading_as_a_constant_what_another_writes_is_a_fault(tmp_path):
    """Saved with `share_mutable_buffers=False` (each method its own copy, on request), the
    decode holds the cross state as a constant: given the source's uses, the check names it."""
    program = MethodsProgram(
        states=(State("kv"), State("cross")),
        methods=(Method("fill", ("cross",)), Method("decode", ("kv",), ("cross",))),
        calls=())
    from method_check import _exported
    eps = _exported(program)
    path = tmp_path / "apart.pte"
    tte.reference.export({n: (ep, None) for n, ep in eps.items()}, str(path),
                         share_mutable_buffers=False)
    uses = {"fill": {"m.cross": True}, "decode": {"m.kv": True, "m.cross": False}}
    texts = [f.text for f in state_faults(path.read_bytes(), uses)]
    assert ("method 'decode' reads buffer 'm.cross' as a constant (its initial value, frozen at "
            "save) while method 'fill' writes it: 'decode' would never see the writes. Every "
            "method must take a mutated buffer as state") in texts


def test_an_earlier_release_file_is_reported_and_loads_with_state_apart(tmp_path, monkeypatch):
    path = tmp_path / "old.pte"
    save_like_an_earlier_release(monkeypatch, DECODE_AND_ENCODE, path)
    faults = inspect_pte(path.read_bytes()).state_faults
    assert faults and all(OVERWRITTEN.fullmatch(f) for f in faults), faults
    cli = subprocess.run([str(REPO / ".venv/bin/torch-tensorrt-ext"), "inspect", str(path)],
                         capture_output=True, text=True)
    assert cli.returncode == 0 and f"STATE FAULT: {faults[0]}" in cli.stdout.splitlines()
    cli = subprocess.run([str(REPO / ".venv/bin/torch-tensorrt-ext"), "inspect", str(path),
                          "--verify"], capture_output=True, text=True)
    assert cli.returncode == 1 and faults[0] in cli.stderr
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        prog = tte.executorch.load(path)
    notices = [str(w.message) for w in seen if "activation memory" in str(w.message)]
    assert len(notices) == 1 and re.fullmatch(re.escape(f"{path}: method 'decode' keeps buffer ")
                                              + r"'m\.(kv|counter)'" + re.escape(
        " in the activation memory every method reuses (a file saved before each program's "
        "state had memory of its own): sharing it would let any other method's call overwrite "
        "it, so each method keeps its own copy of the state and no method sees another's "
        "writes. Save the program again to share state"), notices[0]), notices
    # loaded apart, the encoder no longer overwrites the decoder's state
    model = DECODE_AND_ENCODE.build().eval()
    eager = copy.deepcopy(model)
    for i, (name, tokens, start) in enumerate(DECODE_AND_ENCODE.schedule()):
        args = DECODE_AND_ENCODE.call_args(i, name, tokens, start)
        with torch.no_grad():
            want = getattr(eager, name)(*args)[0]
        torch.testing.assert_close(prog.run(*args, method=name)[0], want)
        torch.testing.assert_close(prog.state()["m.kv"], eager.kv)


def test_a_good_file_has_no_fault_and_verifies(tmp_path):
    path = tmp_path / "good.pte"
    save(DECODE_AND_ENCODE, path)
    assert inspect_pte(path.read_bytes()).state_faults == ()
    cli = subprocess.run([str(REPO / ".venv/bin/torch-tensorrt-ext"), "inspect", str(path),
                          "--verify"], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith(f"{path}: its methods hold one state")
