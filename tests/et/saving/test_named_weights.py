"""Reference engine weights as ExecuTorch named data.

A prefill + decode `.pte` holds each weight once (one `tte/sha256/<hex>` key, the bytes' own
digest, shared by both methods' engines), in the `.pte` or in an external `.ptd`
(`tte.executorch.save_data_externally`); the runtime binds the named data in place and checks
each digest before the first call reads it. A `.ptd` that is missing, truncated, altered or from
another program is refused naming the key — never a crash, never a wrong number.
"""
from __future__ import annotations

import hashlib
import os
import re

import pytest
import torch

import runtime_helpers as H
import torch_tensorrt_ext as tte
from torch_tensorrt_ext.engines.weights import KEY_PREFIX
from torch_tensorrt_ext.errors import TteError
from torch_tensorrt_ext.executorch.inspecting.inspect_pte import inspect_pte
from torch_tensorrt_ext.executorch.inspecting.traffic import flatbuffer_program
from torch_tensorrt_ext.runtime_lib import DelegateRefusedError

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.inspects_pte,
              pytest.mark.emulated_device]

D = 256


class Cached(torch.nn.Module):
    """Two linear layers and a KV cache written at the given positions."""

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.a, self.b = torch.nn.Linear(D, D), torch.nn.Linear(D, D)
        self.register_buffer("k", torch.zeros(1, 1, 8, D))

    def forward(self, x, pos):
        h = self.b(torch.relu(self.a(x)))
        self.k.index_copy_(2, pos, h.view(1, 1, -1, D))
        return h + self.k.mean(dim=2)


def _weights(m: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in m.parameters())


def _prefill(t: int = 3):
    return torch.randn(1, t, D), torch.arange(t)


def _decode(pos: int = 3):
    return torch.randn(1, 1, D), torch.tensor([pos])


def _save(path, model, external: str | None = None):
    methods = {"prefill": (model, _prefill()), "decode": (model, _decode())}
    if external is None:
        return tte.reference.export(methods, path)
    with tte.executorch.save_data_externally(external):
        return tte.reference.export(methods, path)


def _named_keys(pte_bytes: bytes) -> list[str]:
    """The weights' keys among the `.pte`'s named data (a device program keeps its record of the
    state arenas there too)."""
    return [e.key for e in flatbuffer_program(pte_bytes).named_data or ()
            if e.key.startswith(KEY_PREFIX)]


def _step_both(prog, eager):
    for method, args in (("prefill", _prefill()), ("decode", _decode())):
        got = prog.run(list(args), method)
        want = eager(*args)
        got = got[0] if isinstance(got, (list, tuple)) else got
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _fresh(model):
    eager = Cached()
    eager.load_state_dict(model.state_dict())
    return eager.eval()


def test_prefill_and_decode_store_each_weight_once(tmp_path):
    model = Cached().eval()
    path = _save(tmp_path / "two.pte", model)
    data = (tmp_path / "two.pte").read_bytes()
    keys = _named_keys(data)
    # a Linear's weight is stored transposed (engines.linear_weights), its bias as it is
    stored = [p.detach().t().contiguous() if p.dim() == 2 else p.detach()
              for p in model.parameters()]
    want = {KEY_PREFIX + hashlib.sha256(t.numpy().tobytes()).hexdigest() for t in stored}
    assert set(keys) == want and len(keys) == len(want)   # 4 tensors, once each
    assert len(data) <= 1.05 * _weights(model) + 64 * 1024
    engines = [d for m in inspect_pte(data).methods for d in m.delegates]
    assert len(engines) == 2 and all({k for k, _, _ in d.weights} == want and
                                     all(here for _, _, here in d.weights) for d in engines)
    _step_both(tte.executorch.load(path, "prefill"), _fresh(model))


def test_external_ptd_round_trips_and_keeps_the_pte_small(tmp_path):
    model = Cached().eval()
    path = _save(tmp_path / "two.pte", model, external="two")
    ptd = tmp_path / "two.ptd"
    assert ptd.is_file() and (tmp_path / "two.pte").stat().st_size < 0.1 * _weights(model)
    assert ptd.stat().st_size >= _weights(model)
    assert _named_keys((tmp_path / "two.pte").read_bytes()) == []
    engines = [d for m in inspect_pte((tmp_path / "two.pte").read_bytes()).methods
               for d in m.delegates]
    assert all(len(d.weights) == 4 and not any(here for _, _, here in d.weights)
               for d in engines)
    _step_both(tte.executorch.load(path, "prefill", data_files=ptd), _fresh(model))


@pytest.fixture(scope="module")
def external(tmp_path_factory):
    d = tmp_path_factory.mktemp("ext")
    model = Cached().eval()
    _save(d / "m.pte", model, external="m")
    other = d / "other"
    other.mkdir()
    _save(other / "m.pte", Cached(seed=1).eval(), external="m")
    return d, model


def test_a_program_loaded_without_its_ptd_names_the_key(external):
    d, _ = external
    with pytest.raises(DelegateRefusedError, match=r"named data key 'tte/sha256/[0-9a-f]{64}' "
                       r"\(a weight of the reference engine\) is neither in the \.pte nor in a "
                       r"data file loaded with it.*load the \.ptd saved with this \.pte"):
        tte.executorch.load(d / "m.pte", "prefill")


def test_a_ptd_of_another_program_is_refused_naming_the_key(external):
    d, _ = external
    with pytest.raises(DelegateRefusedError, match=r"named data key 'tte/sha256/[0-9a-f]{64}' "
                       r"\(a weight of the reference engine\) is neither in the \.pte"):
        tte.executorch.load(d / "m.pte", "prefill", data_files=d / "other" / "m.ptd")


@pytest.mark.writes_bad_pte
def test_a_truncated_ptd_is_refused(external, tmp_path):
    d, _ = external
    cut = tmp_path / "cut.ptd"
    cut.write_bytes((d / "m.ptd").read_bytes()[:-4096])
    with pytest.raises(TteError, match=r"m\.pte: ExecuTorch could not read its data file "
                       r".*cut\.ptd \(Failed to load method \w+, error: 0x\w+\): it is "
                       r"truncated, damaged or not a \.ptd"):
        tte.executorch.load(d / "m.pte", "prefill", data_files=cut)


@pytest.mark.writes_bad_pte
def test_an_altered_ptd_is_refused_before_a_kernel_reads_it(external, tmp_path):
    d, model = external
    raw = bytearray((d / "m.ptd").read_bytes())
    weight = model.a.weight.detach().t().contiguous().numpy().tobytes()   # stored transposed
    at = bytes(raw).find(weight[:64])
    assert at > 0
    raw[at + 100] ^= 0x40                     # one bit of one weight
    bad = tmp_path / "bad.ptd"
    bad.write_bytes(bytes(raw))
    prog = tte.executorch.load(d / "m.pte", "prefill", data_files=bad)   # sizes still agree
    with pytest.raises(DelegateRefusedError, match=r"named data 'tte/sha256/[0-9a-f]{64}' "
                       r"\(\d+ bytes\) does not hash to the SHA-256 its key names"):
        prog.run(list(_prefill()), "prefill")


def test_a_missing_data_file_is_named():
    with pytest.raises(TteError, match=r"data file /nonexistent\.ptd does not exist"):
        tte.executorch.load(__file__, "forward", data_files="/nonexistent.ptd")


def test_the_cpp_runner_takes_the_data_file(external, tmp_path):
    """`tte_run --data`: prefill then decode like eager; without the file, refused naming a key."""
    d, model = external
    calls = [("prefill", _prefill()), ("decode", _decode())]
    H.write_steps(tmp_path, lambda s: calls[s][1], len(calls), shapes=True)
    for s, (method, _) in enumerate(calls):
        (tmp_path / f"method.{s}").write_text(method)
    device = os.environ.get("TTE_DEVICE", "none")   # the emulated-device child: state there
    done, summary = H.run_runner(d / "m.pte", tmp_path, len(calls), device, "--data",
                                 str(d / "m.ptd"))
    assert done.returncode == 0, done.stderr
    eager = _fresh(model)
    for s, (_, args) in enumerate(calls):
        want = eager(*args)
        torch.testing.assert_close(H.read_output(tmp_path, s, 0, want), want, rtol=1e-5,
                                   atol=1e-5)
    done, _ = H.run_runner(d / "m.pte", tmp_path, 1, device)
    assert done.returncode == 3
    assert re.search(r"named data key 'tte/sha256/[0-9a-f]{64}' \(a weight of the reference "
                     r"engine\) is neither in the \.pte nor in a data file", done.stderr)


class Twins(torch.nn.Module):
    """Two norms whose weights are equal (ones, as a fresh model's are), a tied projection read
    twice, and a counter: equal bytes are one weight, one key."""

    def __init__(self):
        super().__init__()
        self.n1, self.n2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
        self.proj = torch.nn.Linear(D, D, bias=False)
        self.register_buffer("steps", torch.zeros(1, dtype=torch.int64))

    def forward(self, x):
        self.steps.add_(1)
        h = self.proj(self.n1(x))
        return self.n2(h) @ self.proj.weight + self.steps


def test_equal_weights_in_one_engine_are_one_input(tmp_path):
    model = Twins().eval()
    x = torch.randn(1, 2, D)
    path = tte.reference.export(model, (x,), tmp_path / "twins.pte")
    (engine,) = [d for m in inspect_pte(path.read_bytes() if hasattr(path, "read_bytes")
                                        else open(path, "rb").read()).methods
                 for d in m.delegates]
    keys = [k for k, _, _ in engine.weights]
    assert len(keys) == len(set(keys)) == 3     # ones, zeros (the biases), the projection
    prog, eager = tte.executorch.load(path), Twins().eval()
    eager.load_state_dict(model.state_dict())
    for _ in range(3):
        got = prog.run(x)
        torch.testing.assert_close(got[0] if isinstance(got, (list, tuple)) else got, eager(x))


def test_torch_tensorrt_save_writes_the_ptd_beside_the_pte(tmp_path):
    """Upstream's own save, inside `save_data_externally`: model.pte + model.ptd."""
    from torch_tensorrt_ext.upstream_api import torch_tensorrt_module
    torch_tensorrt = torch_tensorrt_module()
    model, args = Cached().eval(), _decode()
    with tte.reference.engines():
        trt = torch_tensorrt.compile(torch.export.export(model, args), ir="dynamo",
                                     arg_inputs=list(args), min_block_size=1)
    with tte.executorch.save_data_externally("model"):
        torch_tensorrt.save(trt, str(tmp_path / "model.pte"), output_format="executorch",
                            arg_inputs=list(args))
    assert (tmp_path / "model.ptd").stat().st_size >= _weights(model)
    prog = tte.executorch.load(tmp_path / "model.pte", data_files=tmp_path / "model.ptd")
    eager = _fresh(model)
    got = prog.run(*args)
    torch.testing.assert_close(got[0] if isinstance(got, (list, tuple)) else got, eager(*args),
                               rtol=1e-5, atol=1e-5)


def test_torch_tensorrt_load_takes_the_data_file(external):
    """Upstream's own loader (patch 0006) hands `data_files=` / `method=` to this project's:
    the program runs like eager with its .ptd, and without it is refused naming the key."""
    from torch_tensorrt_ext.upstream_api import torch_tensorrt_module
    torch_tensorrt = torch_tensorrt_module()
    d, model = external
    prog = torch_tensorrt.load(str(d / "m.pte"), format="executorch", data_files=d / "m.ptd",
                               method="prefill")
    _step_both(prog, _fresh(model))
    with pytest.raises(DelegateRefusedError, match=r"named data key 'tte/sha256/[0-9a-f]{64}'"):
        torch_tensorrt.load(str(d / "m.pte"), format="executorch", method="prefill")


class Reused(torch.nn.Module):
    """One projection applied twice around an op left to PyTorch: two engines in one method, both
    holding the projection's weight."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.proj = torch.nn.Linear(D, D, bias=False)
        self.register_buffer("acc", torch.zeros(1, D))

    def forward(self, x):
        y = self.proj(torch.sigmoid(self.proj(x)))
        self.acc.add_(y.sum(0))
        return y + self.acc


@pytest.mark.parametrize("path_kind", ["reference", "upstream"])
def test_two_engines_of_one_method_share_a_weight(tmp_path, path_kind):
    """Each engine's weight is a constant of its own (the partitioner tags a constant into one
    engine's partition only) over the one snapshot both hold; the file stores it once."""
    from torch_tensorrt_ext.engines.reference_engine import ReferenceEngineModule
    from torch_tensorrt_ext.upstream_api import torch_tensorrt_module
    model, x = Reused().eval(), torch.randn(2, D)
    out = tmp_path / "reused.pte"
    with tte.reference.engines():
        if path_kind == "reference":
            compiled = tte.reference.compile(model, (x,), torch_executed_ops={"aten.sigmoid"})
            tte.reference.export(model, (x,), out, torch_executed_ops={"aten.sigmoid"})
        else:
            torch_tensorrt = torch_tensorrt_module()
            compiled = torch_tensorrt.compile(
                torch.export.export(model, (x,)), ir="dynamo", arg_inputs=[x],
                min_block_size=1, torch_executed_ops={torch.ops.aten.sigmoid.default})
            torch_tensorrt.save(compiled, str(out), output_format="executorch", arg_inputs=[x])
    engines = [m for m in compiled.modules() if isinstance(m, ReferenceEngineModule)]
    assert len(engines) == 2
    [a], [b] = (e.weights for e in engines)
    assert a is not b and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    data = out.read_bytes()
    assert len(set(_named_keys(data))) == 1 and len(data) < 1.2 * _weights(model)
    prog, eager = tte.executorch.load(out), Reused().eval()
    eager.load_state_dict(model.state_dict())
    for step in range(3):
        xs = torch.randn(2, D, generator=torch.Generator().manual_seed(step))
        got = prog.run(xs)
        torch.testing.assert_close(got[0] if isinstance(got, (list, tuple)) else got, eager(xs),
                                   rtol=1e-5, atol=1e-5)


def test_a_weight_unlike_its_record_is_refused_at_save_naming_engine_and_key(tmp_path):
    """The blob's `"weights"` record and the tensors an engine's call hands on are checked against
    each other: a weight replaced after the build (another shape) is refused when the engine is
    called and when upstream's save reaches preprocess (which runs nothing), naming the engine
    and the key — never saved under the old key."""
    from torch_tensorrt_ext.engines.reference_engine import ReferenceEngineModule
    from torch_tensorrt_ext.upstream_api import torch_tensorrt_module
    torch_tensorrt = torch_tensorrt_module()
    model, x = Reused().eval(), torch.randn(2, D)
    with tte.reference.engines():
        compiled = torch_tensorrt.compile(torch.export.export(model, (x,)), ir="dynamo",
                                          arg_inputs=[x], min_block_size=1)
    [engine] = [m for m in compiled.modules() if isinstance(m, ReferenceEngineModule)]
    [ref] = engine._meta.weights
    engine.weight0 = torch.zeros(D, 2)
    want = re.escape(f"engine {engine.name!r}, weight {ref.key}: it is handed a float32 [256, 2] "
                     f"tensor for its float32 [256, 256] weight")
    with pytest.raises(TteError, match=want):    # called
        compiled(x)
    with pytest.raises(TteError, match=want):    # saved: preprocess's own check
        torch_tensorrt.save(compiled, str(tmp_path / "bad.pte"), output_format="executorch",
                            arg_inputs=[x])
    assert not (tmp_path / "bad.pte").exists()
