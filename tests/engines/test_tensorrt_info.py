"""TensorRT side of the engine interface: torch-tensorrt 2.14.0 serialized engine info and delegate
blobs read into `EngineInfo` without TensorRT; unsafe or malformed input refused; reconcile fed."""
import base64
import builtins
import dataclasses
import enum
import json
import os
import pickle
import struct
import sys
import types
from typing import Any

import pytest
import sympy
import torch
from torch.utils._sympy.functions import FloorDiv

from helpers import FIXTURES
import torch_tensorrt_ext as tte
from torch_tensorrt_ext.engines import tensorrt_info as T
from torch_tensorrt_ext.contracts import blob as B

KV, CB = tte.WriteKind.KV_ALIAS, tte.WriteKind.COPY_BACK
ENGINE_BYTES = b"NOT-A-TENSORRT-ENGINE:" + bytes(range(256))


# --------------------------------------------------------- upstream's pickled metadata, by hand

@pytest.fixture
def upstream(monkeypatch):
    """Classes under upstream's module/qualified names, so `pickle.dumps` emits the same globals
    and opcodes torch-tensorrt 2.14.0 does: `torch_tensorrt._enums` Enums (`auto()` values,
    reduced as `cls(value)`), `torch_tensorrt._Device.Device` (plain object: NEWOBJ + BUILD of
    its __dict__), `torch_tensorrt.dynamo._settings.CompilationSettings` (a dataclass whose
    `__getstate__` returns its __dict__ with `torch_executed_ops` as strings)."""
    ns = types.SimpleNamespace()

    class DeviceType(enum.Enum):
        UNKNOWN, GPU, DLA = enum.auto(), enum.auto(), enum.auto()

    class EngineCapability(enum.Enum):
        STANDARD, SAFETY, DLA_STANDALONE = enum.auto(), enum.auto(), enum.auto()

    class dtype(enum.Enum):  # noqa: N801 - upstream's name
        unknown, u8, i8, i32, i64, f16, f32 = (enum.auto() for _ in range(7))

    class Device:
        def __init__(self, gpu_id=0):
            self.device_type, self.gpu_id, self.dla_core = DeviceType.GPU, gpu_id, -1
            self.allow_gpu_fallback = False

    @dataclasses.dataclass
    class CompilationSettings:
        workspace_size: int = 0
        min_block_size: int = 5
        torch_executed_ops: Any = dataclasses.field(default_factory=set)
        device: Any = dataclasses.field(default_factory=Device)
        engine_capability: Any = EngineCapability.STANDARD
        autocast_low_precision_type: Any | None = None
        disabled_constant_fold_exclusions: Any = frozenset()

        def __getstate__(self):
            state = self.__dict__.copy()
            state["torch_executed_ops"] = {str(op) for op in state["torch_executed_ops"]}
            return state

    where = {"torch_tensorrt._enums": (DeviceType, EngineCapability, dtype),
             "torch_tensorrt._Device": (Device,),
             "torch_tensorrt.dynamo._settings": (CompilationSettings,)}
    for mod in ("torch_tensorrt", "torch_tensorrt.dynamo", *where):
        monkeypatch.setitem(sys.modules, mod, types.ModuleType(mod))
    for mod, classes in where.items():
        for cls in classes:
            cls.__module__, cls.__qualname__ = mod, cls.__name__
            setattr(sys.modules[mod], cls.__name__, cls)
            setattr(ns, cls.__name__, cls)
    return ns


def encode_metadata(obj) -> str:
    # _TorchTensorRTModule.py: TorchTensorRTModule.encode_metadata = b64encode(pickle.dumps(m))
    return base64.b64encode(pickle.dumps(obj)).decode("utf-8")


def metadata(up, symexprs):
    # _TorchTensorRTModule.py: TorchTensorRTModule._pack_engine_info builds this dict;
    # "inout_symexprs" is _symbolic_shape_capture.py: extract_symbolic_shape_expressions
    settings = up.CompilationSettings(torch_executed_ops={"torch.ops.aten.sub.Tensor"},
                                      autocast_low_precision_type=up.dtype.f16)
    return encode_metadata({"settings": settings, "inout_symexprs": symexprs,
                            "output_tensors_are_unowned": False})


def kv_symexprs(batch=1):
    """Graph inputs (k_in, v_in, tokens) and outputs (logits, v_out); the interpreter appends the
    aliased k_out after them (_TorchTensorRTModule.py: user_output_count)."""
    cache = {"shape_exprs": [batch, 2, 8, 4], "dtype": torch.float32}
    return {"inputs": [dict(cache, name="k_in"), dict(cache, name="v_in"),
                       {"shape_exprs": [batch, 2, 1, 4], "dtype": torch.float32,
                        "name": "tokens"}],
            "outputs": [{"shape_exprs": [batch, 2], "dtype": torch.float16}, dict(cache)]}


def serialized_info(meta: str, *, engine=ENGINE_BYTES, aliased="k_out@k_in@kv_cache_update"):
    """The list `TorchTensorRTModule._pack_engine_info` returns (_TorchTensorRTModule.py); the
    indices are `SerializedInfoIndex` in _serialized_engine_layout.py."""
    info = [""] * 13                              # SERIALIZATION_LEN
    info[0] = "10"                                # ABI_TARGET_IDX: ABI_VERSION
    info[1] = "_run_on_acc_0_engine"              # NAME_IDX: self.name + "_engine"
    info[2] = "0%9%0%0%NVIDIA H200"               # DEVICE_IDX: serialize_device_info (id%major%
    #                                               minor%int(trt.DeviceType)%name; kGPU = 0)
    info[3] = engine                              # ENGINE_IDX: raw engine bytes
    info[4] = "k_in%v_in%tokens"                  # INPUT_BINDING_NAMES_IDX: serialize_binding_names
    info[5] = "logits%v_out%k_out"                # OUTPUT_BINDING_NAMES_IDX: "%"-joined
    info[6] = "0"                                 # HW_COMPATIBLE_IDX: str(int(hardware_compatible))
    info[7] = meta                                # SERIALIZED_METADATA_IDX: encode_metadata(...)
    info[8] = "linux_x86_64"                      # TARGET_PLATFORM_IDX: _to_serialized_platform
    info[9] = "0"                                 # REQUIRES_OUTPUT_ALLOCATOR_IDX
    info[10] = "0"                                # RESOURCE_ALLOCATION_STRATEGY_IDX
    info[11] = "0"                                # REQUIRES_NATIVE_MULTIDEVICE_IDX
    info[12] = aliased                            # ALIASED_IO_IDX: serialize_aliased_io,
    return info                                   # "out@in@kind" records joined by "%"


BUFFERS_IN = (("k_in", "layers.0.k_cache"), ("v_in", "layers.0.v_cache"))
BUFFERS_OUT = (("v_out", "layers.0.v_cache"), ("k_out", "layers.0.k_cache"))


# ------------------------------------------------------------------------------ reading

def test_reads_packed_engine_info(upstream):
    info = T.engine_info_from_serialized(serialized_info(metadata(upstream, kv_symexprs())),
                                         input_buffers=BUFFERS_IN, output_buffers=BUFFERS_OUT)
    cache = (1, 2, 8, 4)
    assert info == tte.EngineInfo(
        name="_run_on_acc_0_engine", input_names=("k_in", "v_in", "tokens"),
        output_names=("logits", "v_out", "k_out"),
        aliased_io=(tte.AliasedIO("k_out", "k_in", "kv_cache_update"),),
        input_buffers=BUFFERS_IN, output_buffers=BUFFERS_OUT, device="cuda:0", kind="tensorrt",
        input_shapes=(cache, cache, (1, 2, 1, 4)), output_shapes=((1, 2), cache, cache),
        input_dtypes=("float32",) * 3, output_dtypes=("float16", "float32", "float32"))


def test_reads_pickled_engine_state_with_dynamic_dims(upstream):
    """`Engine.__getstate__` / C++ `def_pickle` form: ENGINE_IDX base64 text, slots as bytes;
    a symbolic batch dim (a pickled sympy expression) reads as -1."""
    s0 = sympy.Symbol("s0", positive=True, integer=True)
    info = serialized_info(metadata(upstream, kv_symexprs(batch=FloorDiv(s0 * 2 + 1, 2))),
                           engine=base64.b64encode(ENGINE_BYTES).decode())
    info[2] = "3%9%0%0%NVIDIA H200"
    info = [v.encode() if isinstance(v, str) else v for v in info]
    got = T.engine_info_from_serialized(info, name="decoder.engine_0")
    assert (got.name, got.device, got.input_buffers) == ("decoder.engine_0", "cuda:3", ())
    assert got.input_shapes[0] == (-1, 2, 8, 4) and got.output_shapes[2] == (-1, 2, 8, 4)


def test_no_aliases_and_no_shape_metadata(upstream):
    info = serialized_info(metadata(upstream, None), aliased="")
    info[3] = ""  # `serialize_metadata_only` leaves the engine slot empty; it is never read
    got = T.engine_info_from_serialized(info)
    assert got.aliased_io == () and got.input_shapes == () and got.output_dtypes == ()


# ----------------------------------------------------------------------------- refusals

def test_abi_mismatch_is_refused_with_both_versions(upstream):
    old = serialized_info(metadata(upstream, None))[:12]
    old[0] = "9"
    with pytest.raises(T.TensorRTInfoError) as e:
        T.engine_info_from_serialized(old)
    assert str(e.value) == (
        "engine '_run_on_acc_0_engine': serialized info targets Torch-TensorRT ABI version '9', "
        "but this reader understands ABI version '10' (torch-tensorrt 2.14.0); re-export the "
        "engine with torch-tensorrt 2.14.0")
    with pytest.raises(T.TensorRTInfoError, match=r"ABI 10 has 13 slots, got 12$"):
        T.engine_info_from_serialized(serialized_info(metadata(upstream, None))[:12])


def _symexprs_with_two_inputs():
    s = kv_symexprs()
    s["inputs"] = s["inputs"][:2]
    return s


MALFORMED = {
    "not base64": (7, "!!not-base64!!", r"serialized metadata is not base64"),
    "not a pickle": (7, base64.b64encode(b"\x80\x04garbage").decode(),
                     r"serialized metadata is not a valid pickle \(UnpicklingError"),
    "truncated pickle": (7, encode_metadata({"a": 1})[:-8], r"is not (base64|a valid pickle)"),
    "not a dict": (7, encode_metadata(["settings"]),
                   r"must unpickle to a dict with 'settings' and 'inout_symexprs', got list"),
    "symexprs not a dict": (7, encode_metadata({"inout_symexprs": [1]}),
                            r"inout_symexprs must be a dict with an 'inputs' list"),
    "input count": (7, None, r"metadata describes 2 inputs but the engine has 3 input bindings "
                             r"\['k_in', 'v_in', 'tokens'\]"),
    "bad dim": (7, encode_metadata({"inout_symexprs": {"inputs": [
        {"shape_exprs": ["4"], "dtype": torch.float32}], "outputs": []}}),
        r"inout_symexprs\['inputs'\]\[0\]: dimension '4' is neither a size nor a sympy"),
    "aliased record": (12, "k_out@k_in", r"aliased_io record 'k_out@k_in' is not "
                                         r"'output@input@kind'; refusing to drop it"),
    "aliased binding": (12, "k_out@cache@kv_cache_update",
                        r"aliased_io names input binding 'cache', which is not among its inputs"),
    "device": (2, "0%9%0", r"device info '0%9%0' is not 'id%sm_major%sm_minor%device_type%name'"),
    "flag": (6, "yes", r"slot 6 \(hardware-compatible flag\) must be '0' or '1', got 'yes'"),
    "binding name": (4, "k_in%%tokens", r"input binding names 'k_in%%tokens' has an empty name "
                                        r"at position 1"),
    "slot type": (5, 7, r"slot 5 \(output binding names\) must be str or bytes, got int"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_malformed_info_is_refused(upstream, case):
    idx, value, message = MALFORMED[case]
    info = serialized_info(metadata(upstream, kv_symexprs()))
    info[idx] = metadata(upstream, _symexprs_with_two_inputs()) if value is None else value
    with pytest.raises(T.TensorRTInfoError, match=r"^engine '_run_on_acc_0_engine': " + ".*"
                       + message):
        T.engine_info_from_serialized(info)


class _Exploit:
    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


@pytest.mark.parametrize("func, qualname", [
    (os.system, f"{os.system.__module__}.system"), (builtins.exec, "builtins.exec"),
    (getattr, "builtins.getattr"), (torch.load, "torch.serialization.load"),
])
def test_pickle_that_would_run_code_is_refused(upstream, tmp_path, func, qualname):
    marker = tmp_path / "ran"
    args = {os.system: (f"touch {marker}",), builtins.exec: (f"open({str(marker)!r}, 'w')",),
            getattr: ("abc", "upper"), torch.load: (str(marker),)}[func]
    payload = {"settings": upstream.CompilationSettings(), "inout_symexprs": _Exploit(func, *args)}
    info = serialized_info(encode_metadata(payload))
    with pytest.raises(T.TensorRTInfoError) as e:
        T.engine_info_from_serialized(info)
    assert str(e.value).startswith(f"engine '_run_on_acc_0_engine': serialized metadata pickles "
                                   f"{qualname}, which this reader refuses to load")
    assert not marker.exists()


def test_torch_global_other_than_a_dtype_is_refused():
    with pytest.raises(T.TensorRTInfoError, match=r"pickles torch\.device, which this reader"):
        T.decode_metadata(encode_metadata({"d": torch.device("cpu")}), engine="e")


# --------------------------------------------------------------------------------- blobs

def _fixture(name):
    return (FIXTURES / name).read_bytes()


def test_upstream_tr01_blob():
    got = T.engine_info_from_blob(_fixture("upstream_tr01.blob"), name="engine_0")
    assert got == tte.EngineInfo(name="engine_0", input_names=("x",), output_names=("y",),
                                 device="cuda:0", kind="tensorrt", input_shapes=((1, 4),),
                                 output_shapes=((1, 4),), input_dtypes=("float32",),
                                 output_dtypes=("float32",))


def test_upstream_tr02_blob_cache_out_aliases_cache_in():
    got = T.engine_info_from_blob(_fixture("upstream_tr02_kv.blob"), name="engine_0")
    assert got == tte.EngineInfo(
        name="engine_0", input_names=("cache_in", "tokens", "pos"),
        output_names=("logits", "cache_out"),
        aliased_io=(tte.AliasedIO("cache_out", "cache_in", "kv_cache_update"),),
        device="cuda:0", kind="tensorrt",
        input_shapes=((1, 2, 8, 4), (1, 2, 1, 4), (1,)), output_shapes=((1, 2), (1, 2, 8, 4)),
        input_dtypes=("float32", "float32", "int64"), output_dtypes=("float32", "float32"))


def _tr03_from_tr02(**changes):
    up = B.parse(_fixture("upstream_tr02_kv.blob"))
    meta = dataclasses.replace(up.metadata, **changes)
    return B.serialize(meta, up.engine)


def test_tr03_buffers_become_engine_buffers():
    blob = _tr03_from_tr02(buffers=(B.BufferBinding("cache_in", "layers.0.k_cache"),))
    got = T.engine_info_from_blob(blob, name="engine_0")
    assert got.input_buffers == (("cache_in", "layers.0.k_cache"),)
    assert got.output_buffers == (("cache_out", "layers.0.k_cache"),)
    assert got.aliased_buffers() == {"layers.0.k_cache": got.aliased_io[0]}


def test_broken_blob_is_refused_naming_the_engine():
    with pytest.raises(T.TensorRTInfoError, match=r"^engine 'engine_0': unsupported blob magic "
                                                  r"b'TR09'"):
        T.engine_info_from_blob(b"TR09" + _fixture("upstream_tr01.blob")[4:], name="engine_0")


def test_blob_as_upstream_preprocess_writes_it():
    """torch-tensorrt 2.14.0's TensorRTBackend.preprocess (executorch/backend.py) writes
    io_bindings with dtype '' and shape [] (TensorRTIOBinding defaults): read as unknown."""
    md = json.dumps({"io_bindings": [{"name": n, "dtype": "", "shape": [], "is_input": i}
                                     for n, i in (("x", True), ("y", False))],
                     "aliased_io": [], "hardware_compatible": False, "device_id": 0,
                     "serialized_metadata": "", "target_platform": ""},
                    separators=(",", ":")).encode()
    eng_off = (32 + len(md) + 15) // 16 * 16
    blob = struct.pack(B.HEADER_FORMAT, b"TR01", 32, len(md), eng_off, len(ENGINE_BYTES),
                       b"\x01" + b"\0" * 7) + md + b"\0" * (eng_off - 32 - len(md)) + ENGINE_BYTES
    got = T.engine_info_from_blob(blob, name="e")
    assert (got.input_names, got.output_names, got.kind) == (("x",), ("y",), "tensorrt")


# ------------------------------------------------------------------------------ reconcile

def _kv_plan(*fqns):
    return tte.MutationPlan(tuple(
        tte.BufferWrite(f, KV, "aten.slice_scatter.default", "static [b,d,s_max,h] cache, dim 2")
        for f in fqns))


def test_reconcile_confirms_the_aliased_write_and_copies_back_the_other(upstream):
    """k_out is aliased by the engine (confirmed KV); v_out is a plain output (COPY_BACK)."""
    engine = T.engine_info_from_serialized(
        serialized_info(metadata(upstream, kv_symexprs())),
        input_buffers=BUFFERS_IN, output_buffers=BUFFERS_OUT)
    out = tte.reconcile(_kv_plan("layers.0.k_cache", "layers.0.v_cache"), [engine])
    k, v = out["layers.0.k_cache"], out["layers.0.v_cache"]
    assert (k.kind, k.engine, k.input_binding, k.output_binding) == \
        (KV, "_run_on_acc_0_engine", "k_in", "k_out")
    assert (v.kind, v.input_binding, v.output_binding) == (CB, "v_in", "v_out")
    assert v.reason == ("predicted KV (static [b,d,s_max,h] cache, dim 2) but engine "
                        "'_run_on_acc_0_engine' did not alias it; copied back instead")
    assert out.rebuilds == ()


def test_reconcile_with_blob_engine():
    aliased = T.engine_info_from_blob(
        _tr03_from_tr02(buffers=(B.BufferBinding("cache_in", "layers.0.k_cache"),)), name="e0")
    assert tte.reconcile(_kv_plan("layers.0.k_cache"), [aliased])["layers.0.k_cache"].kind is KV
    plain = T.engine_info_from_blob(_tr03_from_tr02(
        aliased_io=(), copy_back=(B.CopyBack("cache_out", "cache_in"),),
        buffers=(B.BufferBinding("cache_in", "layers.0.k_cache"),)), name="e0")
    w = tte.reconcile(_kv_plan("layers.0.k_cache"), [plain])["layers.0.k_cache"]
    assert (w.kind, w.output_binding) == (CB, "cache_out")


# ------------------------------------------------------------------ the delegate's copy-backs

def _with_copy_back(up, record):
    info = serialized_info(metadata(up, kv_symexprs()))
    meta = pickle.loads(base64.b64decode(info[7]))
    meta[T.COPY_BACK_KEY] = record
    info[7] = encode_metadata(meta)
    return info


def test_reads_the_outputs_its_delegate_copies_back(upstream):
    got = T.engine_info_from_serialized(_with_copy_back(upstream, [["v_out", "v_in"]]))
    assert got.copy_back == (("v_out", "v_in"),)


@pytest.mark.parametrize("record,why", [
    ([["v_out"]], "must be a list of [output, input] binding names"),
    ("v_out@v_in", "must be a list of [output, input] binding names"),
    ([["nope", "v_in"]], "copy_back ('nope' -> 'v_in') must name an output binding"),
    ([["k_out", "k_in"]], "copy_back ('k_out' -> 'k_in') must name an output binding that is "
                          "neither aliased"),
    ([["v_out", "v_in"], ["v_out", "k_in"]], "copy_back ('v_out' -> 'k_in') must name"),
])
def test_a_malformed_copy_back_record_is_refused(upstream, record, why):
    with pytest.raises(T.TensorRTInfoError) as e:
        T.engine_info_from_serialized(_with_copy_back(upstream, record))
    assert why in str(e.value) and "_run_on_acc_0_engine" in str(e.value)


class _TwoEngines(torch.nn.Module):
    """A KV cache and a ring written by two TensorRT-RTX engines split by a host op."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 8, 4))
        self.register_buffer("ring", torch.zeros(1, 4))

    def forward(self, x, pos):
        self.cache.index_copy_(1, pos, x)
        h = torch.sin(self.cache.sum(1))
        self.ring.copy_(torch.cat([self.ring[:, 1:], h[:, :1] * 2], dim=1))
        return self.ring + 1


def test_a_save_decodes_each_engine_record_once(tmp_path, monkeypatch):
    """Declaration, hand-over, partitioner and blob all read one `export.engine_calls.engine_info`:
    a save of a two-engine program decodes each engine's serialized metadata once (8 times each
    before they shared the reader)."""
    from rtx_env import compile_rtx, torch_tensorrt_or_skip

    from torch_tensorrt_ext.export import engine_calls
    torch_tensorrt = torch_tensorrt_or_skip()
    model = _TwoEngines().eval()
    args = (torch.randn(1, 1, 4), torch.tensor([3]))
    trt = compile_rtx(model, args, torch_executed_ops={"torch.ops.aten.sin.default"})
    engine_calls._decoded.cache_clear()
    decoded = []
    real = T.decode_metadata
    monkeypatch.setattr(T, "decode_metadata",
                        lambda encoded, *, engine: decoded.append(engine) or real(
                            encoded, engine=engine))
    torch_tensorrt.save(trt, str(tmp_path / "m.pte"), output_format="executorch",
                        arg_inputs=list(args))
    assert len(decoded) == 2 and len(set(decoded)) == 2, decoded
