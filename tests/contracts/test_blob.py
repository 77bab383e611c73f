"""The delegate blob (CONTRACTS.md §1): upstream fixtures read, TR03 written, malformed refused."""
import hashlib
import json
import struct

import pytest

from helpers import FIXTURES, kv_meta
from torch_tensorrt_ext.contracts import blob as B
from torch_tensorrt_ext.contracts import blob_metadata

ENGINE = b"NOT-A-TENSORRT-ENGINE:" + bytes(range(256)) * 4


def sealed(md, engine):
    """`md` with the engine digest a TR03 writer adds (a dict gets the key; JSON text ending in
    '}' gets it appended, as runtime/tests/blob_builder.h does)."""
    digest = hashlib.sha256(engine).hexdigest()
    if isinstance(md, dict):
        return md if "engine_sha256" in md else {**md, "engine_sha256": digest}
    text = md.rstrip()
    if not text.endswith(b"}") or b'"engine_sha256"' in text:
        return md
    empty = text[:-1].rstrip().endswith(b"{")
    return text[:-1] + (b"" if empty else b",") + b'"engine_sha256":"' + digest.encode() + b'"}'


def raw(magic=b"TR03", md=None, engine=b"E" * 20, md_off=None, md_size=None, eng_off=None,
        eng_size=None, pad=True, seal=True):
    """Hand-assemble a blob; any header field can be overridden to a wrong value. A TR03 blob is
    sealed (engine digest in the metadata, metadata digest in the header) unless `seal` is
    False."""
    seal = seal and magic == b"TR03"
    md = sealed(md, engine) if seal else md
    md_bytes = md if isinstance(md, bytes) else json.dumps(md).encode()
    if md_off is None:
        md_off = 64 if magic == b"TR03" else 32
    end = md_off + len(md_bytes)
    aligned = (end + 15) // 16 * 16
    eo = aligned if eng_off is None else eng_off
    header = struct.pack(B.HEADER_FORMAT, magic, md_off,
                         len(md_bytes) if md_size is None else md_size, eo,
                         len(engine) if eng_size is None else eng_size, b"\x01" + b"\0" * 7)
    if seal and md_off >= 64:
        header += hashlib.sha256(md_bytes).digest()
    body = header + b"\0" * (md_off - len(header)) + md_bytes
    body += b"\0" * (max(aligned, eo) - len(body))
    return body + engine




def refused(data, match, check):
    """`blob.parse` refuses `data` with the message `match` under the check id `check`."""
    with pytest.raises(B.BlobError) as e:
        B.parse(data)
    assert (e.value.check, str(e.value)) == (check, match)
    assert check in B.CHECKS
    return e


# ------------------------------------------------------------------------------ upstream fixtures

def test_reads_upstream_tr01_fixture():
    b = B.parse((FIXTURES / "upstream_tr01.blob").read_bytes())
    m = b.metadata
    assert b.magic == b"TR01" and b.engine == ENGINE
    assert m.io_bindings == (B.IOBinding("x", "float32", (1, 4), True),
                             B.IOBinding("y", "float32", (1, 4), False))
    assert m.aliased_io == () and m.engine_kind == "tensorrt"
    assert m.delegate_inputs == ("x",) and m.delegate_outputs == ("y",)
    assert (m.hardware_compatible, m.device_id, m.serialized_metadata, m.target_platform) == \
        (False, 0, "", "")


def test_reads_upstream_tr02_fixture_with_aliased_kv():
    b = B.parse((FIXTURES / "upstream_tr02_kv.blob").read_bytes())
    m = b.metadata
    assert b.magic == b"TR02" and b.engine == ENGINE
    assert m.input_names == ("cache_in", "tokens", "pos")
    assert m.output_names == ("logits", "cache_out")
    assert m.binding("pos") == B.IOBinding("pos", "int64", (1,), True)
    assert m.aliased_io == (B.AliasedIO("cache_out", "cache_in", "kv_cache_update"),)
    # upstream meaning: every output (the aliased one too) is a delegate output, in order
    assert m.delegate_outputs == ("logits", "cache_out")


@pytest.mark.parametrize("name", ["upstream_tr01.blob", "upstream_tr02_kv.blob"])
def test_upstream_blob_rewritten_as_tr03_keeps_everything(name):
    up = B.parse((FIXTURES / name).read_bytes())
    out = B.serialize(up.metadata, up.engine)
    assert out[:4] == b"TR03"
    again = B.parse(out)
    assert again.metadata == up.metadata and again.engine == up.engine


# ----------------------------------------------------- upstream preprocess: unknown dtype/shape

def upstream_binding(name, is_input):
    """A binding as torch-tensorrt 2.14.0's TensorRTBackend.preprocess writes it: dtype and
    shape unknown, left at TensorRTIOBinding's defaults "" and []."""
    return {"name": name, "dtype": "", "shape": [], "is_input": is_input}


def upstream_meta(bindings, aliased=()):
    """Upstream's metadata dict, in its key order (runtime/tests/blob_builder.h builds the same)."""
    return {"io_bindings": list(bindings), "aliased_io": list(aliased),
            "hardware_compatible": False, "device_id": 0, "serialized_metadata": "",
            "target_platform": ""}


def upstream_kv_meta(cache_out=None):
    return upstream_meta(
        [upstream_binding("cache_in", True), upstream_binding("tokens", True),
         upstream_binding("pos", True), upstream_binding("logits", False),
         cache_out or upstream_binding("cache_out", False)],
        [{"output": "cache_out", "input": "cache_in", "kind": "kv_cache_update"}])


UNKNOWN_IN_TR03 = ("only upstream TR01/TR02 blobs may leave a binding's dtype and shape to the "
                   "delegate's tensors (dtype '' and shape []); a TR03 blob must give both")


def test_reads_upstream_preprocess_blob_with_unknown_bindings():
    m = B.parse(raw(magic=b"TR02", md=upstream_kv_meta())).metadata
    assert m.io_bindings[0] == B.IOBinding("cache_in", "", (), True)
    assert not any(b.known for b in m.io_bindings)
    assert m.aliased_io == (B.AliasedIO("cache_out", "cache_in", "kv_cache_update"),)
    assert m.delegate_outputs == ("logits", "cache_out") and m.engine_kind == "tensorrt"
    with pytest.raises(B.BlobError, match=r"^binding 'pos' has no dtype/shape in the blob"):
        _ = m.binding("pos").nbytes
    t1 = B.parse(raw(magic=b"TR01", md=upstream_meta([upstream_binding("x", True),
                                                     upstream_binding("y", False)]))).metadata
    assert t1.input_names == ("x",) and not t1.binding("y").known
    # one side known, the other unknown: left to the runtime's execute, which has both tensors
    mixed = upstream_kv_meta({"name": "cache_out", "dtype": "float32", "shape": [1, 2, 8, 4],
                              "is_input": False})
    m = B.parse(raw(magic=b"TR02", md=mixed)).metadata
    assert m.binding("cache_out").nbytes == 256 and not m.binding("cache_in").known


def test_unknown_bindings_are_refused_in_tr03_and_with_a_shape():
    tr03 = dict(upstream_kv_meta(), tte_version=3, engine_kind="tensorrt",
                delegate_inputs=["cache_in", "tokens", "pos"], delegate_outputs=["logits"])
    refused(raw(md=tr03), f"io_bindings[0] 'cache_in': empty dtype; {UNKNOWN_IN_TR03}",
            "binding.unknown_in_tr03")
    md = kv_meta()
    md["io_bindings"][2].update(dtype="", shape=[])
    refused(raw(md=md), f"io_bindings[2] 'pos': empty dtype; {UNKNOWN_IN_TR03}",
            "binding.unknown_in_tr03")
    bad = upstream_kv_meta({"name": "cache_out", "dtype": "", "shape": [1, 4], "is_input": False})
    refused(raw(magic=b"TR02", md=bad),
            "io_bindings[4] 'cache_out': empty dtype with shape [1,4]; a binding left to the "
            "delegate's tensors has dtype '' and shape []", "binding.unknown_with_shape")
    # what we write is TR03: an upstream blob's metadata is not re-serialized with unknowns
    up = B.parse(raw(magic=b"TR02", md=upstream_kv_meta()))
    with pytest.raises(B.BlobError) as e:
        B.serialize(up.metadata, up.engine)
    assert str(e.value) == f"binding 'cache_in' has an empty dtype; {UNKNOWN_IN_TR03}"


def test_known_aliased_pair_in_tr02_is_still_compared_at_parse():
    md = upstream_kv_meta({"name": "cache_out", "dtype": "float16", "shape": [1, 2, 8, 4],
                           "is_input": False})
    md["io_bindings"][0] = {"name": "cache_in", "dtype": "float32", "shape": [1, 2, 8, 4],
                            "is_input": True}
    refused(raw(magic=b"TR02", md=md), "aliased pair 'cache_out' -> 'cache_in' differs: output "
                                       "is float16 [1,2,8,4], input is float32 [1,2,8,4]",
            "aliased.mismatch")


# ------------------------------------------------------------------------------------ TR03 write

def test_tr03_layout_is_the_contract_header():
    meta = B.parse(raw(md=kv_meta())).metadata
    data = B.serialize(meta, b"PAYLOAD")
    magic, md_off, md_size, eng_off, eng_size, reserved = struct.unpack(B.HEADER_FORMAT, data[:32])
    assert (magic, md_off, eng_size, reserved) == (b"TR03", 64, 7, b"\x01" + b"\0" * 7)
    assert eng_off % 16 == 0 and eng_off >= 64 + md_size
    assert data[eng_off:] == b"PAYLOAD" and set(data[64 + md_size:eng_off]) <= {0}
    # integrity: [32, 64) is the metadata's SHA-256; the metadata records the payload's
    assert data[32:64] == hashlib.sha256(data[64:64 + md_size]).digest()
    md = json.loads(data[64:64 + md_size])
    # upstream's keys keep their place and meaning; the extensions follow
    assert list(md)[:6] == ["io_bindings", "aliased_io", "hardware_compatible", "device_id",
                            "serialized_metadata", "target_platform"]
    assert md["tte_version"] == 5 and md["engine_kind"] == "reference"
    assert "weights" not in md          # written only when the engine has weights
    assert "engine_data" not in md      # written only when the plan is named data
    assert md["delegate_inputs"] == ["tok", "pos", "cache_in", "step_in"]
    assert md["delegate_outputs"] == ["logits"]
    assert md["buffers"] == [{"input": "cache_in", "fqn": "layers.0.attn.k_cache"},
                             {"input": "step_in", "fqn": "step"}]
    assert md["copy_back"] == [{"output": "step_out", "input": "step_in"}]
    assert list(md)[-1] == "engine_sha256"
    assert md["engine_sha256"] == hashlib.sha256(b"PAYLOAD").hexdigest()
    assert B.parse(data).metadata == meta


def test_serialize_refuses_inconsistent_metadata():
    meta = B.parse(raw(md=kv_meta())).metadata
    bad = B.BlobMetadata(io_bindings=meta.io_bindings, aliased_io=meta.aliased_io,
                         engine_kind="reference", delegate_outputs=("logits",))
    with pytest.raises(B.BlobError, match="output binding 'step_out' is neither"):
        B.serialize(bad, b"")


# ------------------------------------------------------------------------------------- malformed

def test_refuses_bad_magic_naming_it():
    refused(raw(magic=b"TRX1", md=kv_meta()),
            "unsupported blob magic b'TRX1': this reader accepts TR01, TR02 and TR03",
            "blob.magic")


def test_refuses_short_blob():
    refused(b"TR03" + b"\0" * 10, "blob is 14 bytes, shorter than its 32-byte header",
            "blob.short")


def test_refuses_metadata_past_end():
    data = raw(md=kv_meta(), engine=b"")
    n = len(data)
    md_size = struct.unpack_from("<I", data, 8)[0]
    bad = data[:8] + struct.pack("<I", n) + data[12:]
    refused(bad, f"metadata [64, {64 + n}) runs past the end of the {n}-byte blob",
            "blob.metadata_range")
    assert md_size < n


def test_refuses_engine_past_end():
    data = raw(md=kv_meta(), engine=b"E" * 20)
    eng_off = struct.unpack_from("<I", data, 12)[0]
    bad = data[:16] + struct.pack("<Q", 21) + data[24:]
    refused(bad, f"engine [{eng_off}, {eng_off + 21}) runs past the end of the "
                 f"{len(data)}-byte blob", "blob.engine_range")


def test_refuses_unaligned_engine_and_overlap_and_header_overlap():
    md = kv_meta()
    refused(raw(md=md, eng_off=40, eng_size=0), "engine offset 40 is not 16-byte aligned",
            "blob.engine_alignment")
    data = raw(md=md)
    md_size = struct.unpack_from("<I", data, 8)[0]
    refused(raw(md=md, eng_off=48, eng_size=0),
            f"metadata [64, {64 + md_size}) overlaps the engine at offset 48",
            "blob.overlap")
    refused(raw(md=md, md_off=16), "metadata offset 16 lies inside the 64-byte header",
            "blob.metadata_offset")
    # a TR03 header holds the metadata digest at [32, 64)
    refused(raw(md=md, md_off=32), "metadata offset 32 lies inside the 64-byte header",
            "blob.metadata_offset")
    refused(raw(magic=b"TR02", md=upstream_kv_meta(), md_off=16),
            "metadata offset 16 lies inside the 32-byte header", "blob.metadata_offset")


def test_refuses_truncated_json():
    text = json.dumps(kv_meta()).encode()
    cut = text[:text.rindex(b",") + 1]  # ends right after a comma: nothing is wrong but the end
    with pytest.raises(B.BlobError) as e:
        B.parse(raw(md=cut))
    assert str(e.value).startswith(f"metadata JSON is truncated or malformed at byte {len(cut)}:")
    refused(raw(md=b"[1, 2]"), "metadata JSON must be an object", "metadata.root")


def test_refuses_alias_naming_unknown_binding():
    md = kv_meta(aliased_io=[{"output": "cache_out", "input": "v_cache",
                              "kind": "kv_cache_update"}])
    refused(raw(md=md), "aliased_io[0] names input 'v_cache', which is not a binding",
            "ref.missing")
    md = kv_meta(aliased_io=[{"output": "nope", "input": "cache_in"}])
    refused(raw(md=md), "aliased_io[0] names output 'nope', which is not a binding",
            "ref.missing")
    md = kv_meta(aliased_io=[{"output": "cache_in", "input": "cache_in"}])
    refused(raw(md=md), "aliased_io[0] names output 'cache_in', which is an input binding",
            "ref.direction")


def test_refuses_shape_and_dtype_mismatch_in_aliased_pair():
    md = kv_meta()
    md["io_bindings"][5]["shape"] = [1, 2, 4, 4]
    refused(raw(md=md), "aliased pair 'cache_out' -> 'cache_in' differs: output is "
                        "float32 [1,2,4,4], input is float32 [1,2,8,4]",
            "aliased.mismatch")
    md = kv_meta()
    md["io_bindings"][5]["dtype"] = "float16"
    refused(raw(md=md), "aliased pair 'cache_out' -> 'cache_in' differs: output is "
                        "float16 [1,2,8,4], input is float32 [1,2,8,4]",
            "aliased.mismatch")


def test_refuses_internal_output_neither_aliased_nor_copy_back():
    refused(raw(md=kv_meta(copy_back=[])),
            "output binding 'step_out' is neither a delegate output, aliased (aliased_io) nor "
            "copy-back (copy_back): its value would be dropped", "output.dropped")


def test_refuses_other_tte_version_and_unknown_engine_kind():
    refused(raw(md=kv_meta(tte_version=6)),
            "TR03 blob has tte_version 6; this reader understands versions 3 to 5 only",
            "metadata.tte_version")
    refused(raw(md=kv_meta(tte_version=2)),
            "TR03 blob has tte_version 2; this reader understands versions 3 to 5 only",
            "metadata.tte_version")


_KEY = "tte/sha256/" + "ab" * 32


def test_version_4_weights_round_trip_and_version_3_still_reads():
    weights = [{"key": _KEY, "dtype": "bfloat16", "shape": [4, 8]},
               {"key": "tte/sha256/" + "cd" * 32, "dtype": "int8", "shape": [300]},
               {"key": _KEY, "dtype": "int8", "shape": [64]}]   # equal bytes, another view
    meta = B.parse(raw(md=kv_meta(tte_version=4, weights=weights))).metadata
    assert [(w.key, w.dtype, w.shape, w.nbytes) for w in meta.weights] == [
        (_KEY, "bfloat16", (4, 8), 64), ("tte/sha256/" + "cd" * 32, "int8", (300,), 300),
        (_KEY, "int8", (64,), 64)]
    again = B.parse(B.serialize(meta, b"P")).metadata
    assert again.weights == meta.weights
    assert B.parse(raw(md=kv_meta(tte_version=3))).metadata.weights == ()


def test_version_5_engine_data_round_trips_with_an_empty_payload():
    key = "tte/sha256/" + "cd" * 32
    meta = B.BlobMetadata(**{**B.parse(raw(md=kv_meta())).metadata.__dict__,
                             "engine_kind": "tensorrt", "engine_data": B.EngineData(key, 4096)})
    data = B.serialize(meta, b"")
    again = B.parse(data).metadata
    assert again.engine_data == B.EngineData(key, 4096) and again == meta
    assert len(B.parse(data).engine) == 0
    with pytest.raises(B.BlobError, match=f"a blob whose plan is named data '{key}' carries a "
                                          "1-byte payload; its payload is empty") as e:
        B.serialize(meta, b"P")
    assert e.value.check == "engine_data.payload"


_TENSOR = "is not a static tensor of a known dtype within 2**63-1 bytes"


@pytest.mark.parametrize("weights, message, check", [
    ([{"key": "", "dtype": "float32", "shape": [1]}],
     "weights[0]: empty key; a weight is named data under a key", "weights.key"),
    ([{"key": _KEY, "dtype": "float32", "shape": [-1, 4]}],
     f"weights[0] '{_KEY}': \"float32\" [-1, 4] {_TENSOR}", "weights.tensor"),
    ([{"key": _KEY, "dtype": "complex64", "shape": [2]}],
     f"weights[0] '{_KEY}': \"complex64\" [2] {_TENSOR}", "weights.tensor"),
    ([{"key": _KEY, "dtype": "float32", "shape": [2 ** 62, 4]}],
     f"weights[0] '{_KEY}': \"float32\" [4611686018427387904, 4] {_TENSOR}", "weights.tensor"),
    ([{"key": _KEY, "dtype": "float32"}], "weights[0] has no 'shape'", "metadata.missing"),
    ([[_KEY]], "weights[0] must be an object", "metadata.type"),
    ({"key": "k"}, "metadata: 'weights' must be list, got {\"key\": \"k\"}", "metadata.type"),
])
def test_refuses_malformed_weights(weights, message, check):
    refused(raw(md=kv_meta(weights=weights)), message, check)


def test_refuses_weights_on_a_tensorrt_engine():
    refused(raw(md=kv_meta(engine_kind="tensorrt",
                           weights=[{"key": _KEY, "dtype": "float32", "shape": [1]}])),
            "a tensorrt engine carries its weights in its plan; 'weights' is for reference "
            "engines only", "weights.engine_kind")
    refused(raw(md=kv_meta(engine_kind="onnx")),
            "engine_kind 'onnx' is not one of ['reference', 'tensorrt', 'tensorrt_rtx']",
            "metadata.engine_kind")


def test_refuses_duplicates_and_missing_delegate_inputs():
    md = kv_meta()
    md["io_bindings"].append(dict(md["io_bindings"][0]))
    refused(raw(md=md), "binding name 'cache_in' appears twice in io_bindings",
            "binding.duplicate")
    refused(raw(md=kv_meta(delegate_inputs=["tok", "pos", "cache_in"])),
            "delegate_inputs misses input binding 'step_in' (every input binding must be a "
            "delegate argument)", "delegate_inputs.missing")
    refused(raw(md=kv_meta(delegate_outputs=["logits", "logits"])),
            "delegate_outputs lists output binding 'logits' twice", "delegate_outputs.duplicate")


def test_refuses_two_writers_of_one_input_and_aliased_copy_back():
    md = kv_meta(copy_back=[{"output": "step_out", "input": "step_in"},
                            {"output": "cache_out", "input": "cache_in"}])
    refused(raw(md=md), "output binding 'cache_out' is both aliased and copy-back",
            "copy_back.aliased")
    md = kv_meta(copy_back=[{"output": "step_out", "input": "step_in"},
                            {"output": "step_out", "input": "step_in"}])
    refused(raw(md=md), "copy_back lists output binding 'step_out' twice", "copy_back.duplicate")


def test_refuses_copy_back_type_mismatch_and_unknown_dtype():
    md = kv_meta()
    md["io_bindings"][6]["dtype"] = "int32"
    refused(raw(md=md), "copy_back pair 'step_out' -> 'step_in' differs: output is int32 [1], "
                        "input is int64 [1]", "copy_back.mismatch")
    md = kv_meta()
    md["io_bindings"][1]["dtype"] = "complex64"
    refused(raw(md=md), "io_bindings[1] 'tok': unknown dtype 'complex64' (known: float32, "
                        "float16, bfloat16, int64, int32, int8, uint8, bool, float64)",
            "binding.unknown_dtype")


def test_tr01_with_aliased_io_is_refused():
    md = kv_meta()
    refused(raw(magic=b"TR01", md=md),
            "TR01 blob carries aliased_io; upstream writes such blobs as TR02",
            "metadata.tr01_aliased")


def test_tr02_ignores_extension_keys_but_refuses_tte_version():
    md = kv_meta(copy_back=[], delegate_outputs=["logits"])
    del md["tte_version"]
    m = B.parse(raw(magic=b"TR02", md=md)).metadata
    assert m.engine_kind == "tensorrt" and m.delegate_outputs == ("logits", "cache_out",
                                                                  "step_out")
    assert m.buffers == () and m.copy_back == ()
    # tte_version is what a TR03 writer puts there: a TR02 magic on it is a damaged TR03 magic
    refused(raw(magic=b"TR02", md={**md, "tte_version": 3}),
            "TR02 blob carries the TR03 key 'tte_version': its magic is damaged; "
            "re-export the .pte", "metadata.damaged_magic")


# ------------------------------------------------------ JSON both readers refuse, check for check
# runtime/tests/test_blob.cpp::json_defects_are_refused_with_their_check reads the same texts and
# names the same check ids (tests/contracts/test_blob_differential.py compares the readers on a
# corpus).

KV_TEXT = json.dumps(kv_meta())


def kv_text(old, new):
    assert old in KV_TEXT
    return KV_TEXT.replace(old, new, 1).encode()


def test_refuses_duplicate_keys_naming_them():
    refused(raw(md=kv_text('"device_id": 0', '"device_id": 0, "device_id": 1')),
            "metadata JSON has the key 'device_id' twice in one object",
            "json.duplicate_key")
    # in a nested object; reported when that object closes, before the rest is read
    refused(raw(md=kv_text('"name": "pos"', '"name": "pos", "name": "pos2"')),
            "metadata JSON has the key 'name' twice in one object", "json.duplicate_key")


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e999", "-1.5e400",
                                  "1" * 400])
def test_refuses_non_finite_numbers(text):
    refused(raw(md=kv_text('"device_id": 0', f'"device_id": {text}')),
            f"metadata JSON holds the non-finite number {text}; numbers must be finite",
            "json.non_finite")


def test_typed_integers_must_fit_int64():
    refused(raw(md=kv_text('"device_id": 0', '"device_id": 100000000000000000000')),
            "metadata: 'device_id' must be int (int64), got 100000000000000000000",
            "metadata.type")
    refused(raw(md=kv_text('"device_id": 0', '"device_id": -9223372036854775809')),
            "metadata: 'device_id' must be int (int64), got -9223372036854775809",
            "metadata.type")
    refused(raw(md=kv_text('"shape": [1]', '"shape": [9223372036854775808]')),
            "io_bindings[2] 'pos': shape [9223372036854775808] must hold integers >= -1",
            "binding.shape")
    # a key no reader reads is not typed: any integer a double holds is fine there
    assert B.parse(raw(md=kv_text('"device_id": 0',
                                  '"device_id": 0, "x": 100000000000000000000')))
    refused(raw(md=kv_text('"shape": [1]', '"shape": [1, 2.5, "a\\n\\u00e9"]')),
            'io_bindings[2] \'pos\': shape [1, 2.5, "a\\n\\u00e9"] must hold integers >= -1',
            "binding.shape")
    ok = B.parse(raw(md=kv_text('"device_id": 0', '"device_id": 9223372036854775807')))
    assert ok.metadata.device_id == 2 ** 63 - 1


@pytest.mark.parametrize("bad, at", [
    (b"\xff", 0), (b"\xc0\xaf", 0), (b"\xed\xa0\x80", 0), (b"\xf4\x90\x80\x80", 0),
    (b"ab\xe2\x82", 2), (b"a\xe2\x28\xa1", 1), (b"\xc3\xa9\x80", 2), (b"\xf0\x9f\x98", 0),
])
def test_refuses_invalid_utf8_at_the_byte(bad, at):
    text = kv_text('"target_platform": ""', '"target_platform": "@@"')
    start = text.index(b"@@")
    refused(raw(md=text.replace(b"@@", bad)), f"metadata is not UTF-8 at byte {start + at}",
            "json.utf8")


def test_valid_utf8_and_escapes_are_read():
    md = B.parse(raw(md=kv_text('"target_platform": ""',
                                '"target_platform": "\\u00e9\u00e9\\ud83d\\ude00"'))).metadata
    assert md.target_platform == "\u00e9\u00e9\U0001f600"


@pytest.mark.parametrize("escape, named", [
    ("\\ud800", "\\ud800"), ("\\udc00", "\\udc00"), ("x\\ud800\\u0041", "\\ud800"),
    ("\\ud800\\ud800\\udc00", "\\ud800"), ("\\udfff\\ud800", "\\udfff"),
])
def test_refuses_unpaired_surrogate_escape(escape, named):
    refused(raw(md=kv_text('"target_platform": ""', f'"target_platform": "{escape}"')),
            f"metadata JSON holds the unpaired surrogate escape {named}; strings must be "
            f"valid Unicode", "json.surrogate")


def test_json_defects_are_refused_where_they_are():
    """Each JSON defect alone is refused under its own id; with several, the first `json.loads`
    meets (a non-finite number or a syntax error where it is, a duplicate key when its object
    closes), then depth, an unpaired surrogate, a NUL on the parsed value (`blob_json`: the C++
    reader may name another of the same text's defects). Arrays and objects nest at most 64
    deep; scalars inside them do not count."""
    def check(old, new):
        with pytest.raises(B.BlobError) as e:
            B.parse(raw(md=kv_text(old, new)))
        return e.value.check
    tp = '"target_platform": ""'
    assert check(tp, '"target_platform": "\\ud800"') == "json.surrogate"
    assert check(tp, '"target_platform": "\\u0000"') == "json.nul"
    assert check(tp, '"x": {"a": 1, "a": 2}') == "json.duplicate_key"
    assert check(tp, '"target_platform": NaN') == "json.non_finite"
    assert check(tp, '"target_platform": "\\ud800", "device_id": NaN') == "json.non_finite"
    assert check(tp, '"target_platform": NaN, "x": "\\ud800"') == "json.non_finite"
    assert check(tp, '"target_platform": "\\u0000", "x": "\\ud800"') == "json.surrogate"
    assert check(tp, '"x": {"a": 1, "a": "\\ud800"}') == "json.duplicate_key"
    assert check(tp, '"x": {"a": 1, "a": 2}, "y": NaN') == "json.duplicate_key"
    assert check(tp, '"x": {NaN: 1}') == "json.syntax"
    assert check(tp, '"x": ' + "[" * 64 + "]" * 64) == "json.depth"  # the root is depth 1
    assert B.parse(raw(md=kv_text(tp, tp + ', "x": ' + "[" * 63 + "1" + "]" * 63)))
    assert check(tp, '"x": ' + "[" * 64 + "1e999" + "]" * 64) == "json.non_finite"


def test_serialize_never_writes_what_the_readers_refuse():
    meta = B.parse(raw(md=kv_meta())).metadata
    bad = B.BlobMetadata(**{**meta.__dict__, "target_platform": "x\ud800"})
    with pytest.raises(B.BlobError, match=r"unpaired surrogate escape \\ud800"):
        B.serialize(bad, b"")


def test_json_error_offset_counts_bytes():
    text = kv_text('"target_platform": ""', '"target_platform": "\u00e9\u00e9",,')
    # python's JSONDecodeError.pos counts characters; the message gives the blob's byte
    refused(raw(md=text), f"metadata JSON is truncated or malformed at byte "
                          f"{text.index(b',,') + 1}: Expecting property name enclosed in double "
                          f"quotes", "json.syntax")


@pytest.mark.parametrize("version", ["3.0", "3e0", "true", '"3"', "null"])
def test_tte_version_must_be_the_integer_3_4_or_5(version):
    shown = {"3e0": "3.0"}.get(version, version)
    refused(raw(md=kv_text('"tte_version": 3', f'"tte_version": {version}')),
            f"TR03 blob has tte_version {shown}; this reader understands versions 3 to 5 only",
            "metadata.tte_version")


def test_blob_module_keeps_its_names_and_validation_lives_apart():
    from torch_tensorrt_ext.contracts import blob_validate as V
    m = B.parse(raw(md=kv_meta())).metadata
    assert blob_metadata.parse_metadata(B.MAGIC_TR03,
                                        json.dumps(sealed(kv_meta(), b"E" * 20)).encode()) == m
    twice = B.BlobMetadata(**{**m.__dict__, "io_bindings": m.io_bindings * 2})
    for validate in (B.validate, V.validate):
        with pytest.raises(B.BlobError, match="binding name 'cache_in' appears twice"):
            validate(twice)


def test_tensorrt_rtx_kind_and_weight_streaming_budget_round_trip():
    meta = B.BlobMetadata(io_bindings=(B.IOBinding("x", "float32", (2,), True),
                                       B.IOBinding("y", "float32", (2,), False)),
                          engine_kind="tensorrt_rtx", weight_streaming_budget=1 << 20)
    blob = B.parse(B.serialize(meta, b"engine"))
    assert (blob.metadata.engine_kind, blob.metadata.weight_streaming_budget) == \
        ("tensorrt_rtx", 1 << 20)
    raw = dict(meta.to_json_dict(), weight_streaming_budget=-1)
    with pytest.raises(B.BlobError) as e:
        blob_metadata.parse_metadata(B.MAGIC_TR03, json.dumps(raw).encode())
    assert (e.value.check, str(e.value)) == (
        "metadata.weight_streaming_budget",
        "metadata: 'weight_streaming_budget' must be a non-negative integer (bytes of engine "
        "weights kept on the device), got -1")
