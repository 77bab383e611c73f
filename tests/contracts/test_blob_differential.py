"""The two blob readers agree: one corpus — hand-made hostile
metadata and seeded mutations of valid blobs — goes through python's `blob.parse` and the C++
runtime's reader (`tte_runtime_check_blob` through ctypes: parse, integrity, validation, binding
plan), and each input must be accepted by both or refused by both, and where both refuse, under
the same check id (`BlobError.check`, `tte_runtime_last_check`: CONTRACTS.md §1 "Check ids") —
except that a JSON text with several JSON-level defects may be refused under another `json.*` id
of the same text (`contracts.blob_json` says why); python may raise nothing but `BlobError`. The
messages are each reader's own and not compared."""
import hashlib
import json
import random
import struct


import runtime_helpers as H
from helpers import FIXTURES, REPO, kv_meta
from torch_tensorrt_ext.contracts import blob as B
from torch_tensorrt_ext import runtime_lib

CONTRACTS = REPO / "docs" / "CONTRACTS.md"



def make(md, magic=b"TR03", engine=b"E" * 20, seal=True):
    """A blob around metadata `md` (dict or bytes) laid out as serialize does; TR03 sealed."""
    text = md if isinstance(md, bytes) else json.dumps(md).encode()
    if magic == b"TR03" and seal and text.rstrip().endswith(b"}") and \
            b'"engine_sha256"' not in text:
        body = text.rstrip()[:-1]
        sep = b"" if body.rstrip().endswith(b"{") else b","
        text = body + sep + b'"engine_sha256":"' + \
            hashlib.sha256(engine).hexdigest().encode() + b'"}'
    md_off = 64 if magic == b"TR03" else 32
    eng_off = (md_off + len(text) + 15) // 16 * 16
    head = struct.pack(B.HEADER_FORMAT, magic, md_off, len(text), eng_off, len(engine),
                       b"\x01" + b"\0" * 7)
    if magic == b"TR03":
        head += hashlib.sha256(text).digest()
    return head + text + b"\0" * (eng_off - md_off - len(text)) + engine




def with_binding(i, **over):
    md = kv_meta()
    md["io_bindings"][i] = {**md["io_bindings"][i], **over}
    return md


def nested(depth, leaf="1"):
    return ("[" * depth + leaf + "]" * depth).encode()


def kv_text_with(extra: bytes) -> bytes:
    """kv_meta's JSON with `"x": <extra>` as its first member."""
    return b'{"x":' + extra + b"," + json.dumps(kv_meta()).encode()[1:]


KEY = "tte/sha256/" + "ab" * 32


def weight(**over):
    return {"key": KEY, "dtype": "float32", "shape": [4, 64], **over}


def weights_cases():
    """Version 4's weights: valid, then each way an entry can be wrong, in both readers' order."""
    v4 = dict(tte_version=4)
    yield "weights valid", make(kv_meta(**v4, weights=[weight(), weight(key=KEY[:-1] + "c")]))
    yield "weights in version 3", make(kv_meta(weights=[weight()]))
    yield "weights empty list", make(kv_meta(**v4, weights=[]))
    yield "weights not a list", make(kv_meta(**v4, weights={"key": KEY}))
    yield "weights entry not an object", make(kv_meta(**v4, weights=[KEY]))
    yield "weights key missing", make(kv_meta(**v4, weights=[{"dtype": "float32", "shape": []}]))
    yield "weights key not a string", make(kv_meta(**v4, weights=[weight(key=7)]))
    yield "weights dtype missing", make(kv_meta(**v4, weights=[{"key": KEY, "shape": [1]}]))
    yield "weights shape not a list", make(kv_meta(**v4, weights=[weight(shape=4)]))
    yield "weights key empty", make(kv_meta(**v4, weights=[weight(key="")]))
    yield "weights key twice", make(kv_meta(**v4, weights=[weight(), weight(dtype="int8")]))
    yield "weights key twice, bad tensor", make(kv_meta(**v4, weights=[weight(),
                                                                       weight(shape=[-1])]))
    yield "weights dtype unknown", make(kv_meta(**v4, weights=[weight(dtype="complex64")]))
    yield "weights dtype empty", make(kv_meta(**v4, weights=[weight(dtype="")]))
    yield "weights dim -1", make(kv_meta(**v4, weights=[weight(shape=[-1, 4])]))
    yield "weights dim bool", make(kv_meta(**v4, weights=[weight(shape=[True, 4])]))
    yield "weights dim float", make(kv_meta(**v4, weights=[weight(shape=[1.5])]))
    yield "weights 2**63 bytes", make(kv_meta(**v4, weights=[weight(shape=[1 << 61, 4])]))
    yield "weights dims wrap", make(kv_meta(**v4, weights=[weight(shape=[1 << 32, 1 << 32, 16])]))
    yield "weights scalar", make(kv_meta(**v4, weights=[weight(shape=[])]))
    yield "weights zero-size", make(kv_meta(**v4, weights=[weight(shape=[0, 4])]))
    yield "weights on tensorrt", make(kv_meta(**v4, engine_kind="tensorrt", weights=[weight()]))
    yield "weights bad then tensorrt", make(kv_meta(**v4, engine_kind="tensorrt",
                                                   weights=[weight(key="")]))


PLAN_KEY = "tte/sha256/" + "cd" * 32


def engine_data_cases():
    """Version 5's engine_data: valid (payload empty), then each way it can be wrong, in both
    readers' order."""
    def trt(**over):
        return kv_meta(tte_version=5, engine_kind="tensorrt", **over)
    ok = {"key": PLAN_KEY, "nbytes": 4096}
    yield "engine_data valid", make(trt(engine_data=ok), engine=b"")
    yield "engine_data on tensorrt_rtx", make(kv_meta(tte_version=5, engine_kind="tensorrt_rtx",
                                                      engine_data=ok), engine=b"")
    yield "engine_data with a payload", make(trt(engine_data=ok))
    yield "engine_data in version 4", make(kv_meta(tte_version=4, engine_kind="tensorrt",
                                                   engine_data=ok), engine=b"")
    yield "engine_data version 6", make(kv_meta(tte_version=6, engine_kind="tensorrt",
                                                engine_data=ok), engine=b"")
    yield "engine_data not an object", make(trt(engine_data=[PLAN_KEY]), engine=b"")
    yield "engine_data key missing", make(trt(engine_data={"nbytes": 1}), engine=b"")
    yield "engine_data nbytes missing", make(trt(engine_data={"key": PLAN_KEY}), engine=b"")
    yield "engine_data key not a string", make(trt(engine_data={**ok, "key": 7}), engine=b"")
    yield "engine_data nbytes float", make(trt(engine_data={**ok, "nbytes": 1.0}), engine=b"")
    yield "engine_data nbytes bool", make(trt(engine_data={**ok, "nbytes": True}), engine=b"")
    yield "engine_data nbytes 2**63", make(trt(engine_data={**ok, "nbytes": 1 << 63}), engine=b"")
    yield "engine_data key empty", make(trt(engine_data={**ok, "key": ""}), engine=b"")
    yield "engine_data key bad prefix", make(trt(engine_data={**ok, "key": "x" + PLAN_KEY[1:]}),
                                             engine=b"")
    yield "engine_data key uppercase", make(trt(engine_data={**ok, "key": PLAN_KEY.upper()}),
                                            engine=b"")
    yield "engine_data key short", make(trt(engine_data={**ok, "key": PLAN_KEY[:-1]}), engine=b"")
    yield "engine_data key long", make(trt(engine_data={**ok, "key": PLAN_KEY + "0"}), engine=b"")
    yield "engine_data bad key, bad nbytes", make(trt(engine_data={"key": "k", "nbytes": 0}),
                                                  engine=b"")
    yield "engine_data nbytes 0", make(trt(engine_data={**ok, "nbytes": 0}), engine=b"")
    yield "engine_data nbytes -1", make(trt(engine_data={**ok, "nbytes": -1}), engine=b"")
    yield "engine_data on reference", make(kv_meta(tte_version=5, engine_data=ok), engine=b"")
    yield "engine_data bad on reference", make(kv_meta(tte_version=5,
                                                       engine_data={**ok, "nbytes": 0}),
                                               engine=b"")
    yield "engine_data and weights", make(trt(engine_data=ok, weights=[weight()]), engine=b"")


def hostile_cases():
    """(name, blob): the inputs the readers were once found disagreeing on, and their neighbours."""
    big = (1 << 63) - 1
    yield "valid", make(kv_meta())
    # NUL inside strings: in a dtype (C++ compared it with strcmp), a name, a key, a value
    yield "nul dtype", make(with_binding(1, dtype="float32\u0000junk"))
    yield "nul name", make(kv_meta(delegate_inputs=["tok\u0000", "cache_in", "step_in"]))
    yield "nul fqn", make(kv_meta(buffers=[{"input": "cache_in", "fqn": "a\u0000b"}]))
    yield "nul key", make(kv_text_with(b'{"k\\u0000":1}'))
    yield "nul unused value", make(kv_meta(serialized_metadata="x\u0000"))
    # nesting: the root is level 1; at most 64 levels
    for depth in (62, 63, 64, 65, 990, 5000):
        yield f"nesting {depth} in a member", make(kv_text_with(nested(depth)))
        yield f"nesting {depth} empty", make(kv_text_with(nested(depth, "")))
        yield f"nesting {depth} objects", make(kv_text_with(
            b'{"a":' * depth + b"1" + b"}" * depth))
    yield "nesting 64 as root", make(nested(63, "") )
    yield "nesting 2000 as root", make(nested(2000))
    yield "nesting then syntax error", make(b"[" * 70 + b"]")
    yield "syntax error then nesting", make(b"[1 2" + b"[" * 70)
    # element counts and byte sizes: the largest binding is 2**63-1 bytes
    yield "int8 of 2**63-1", make(with_binding(1, dtype="int8", shape=[big]))
    yield "int16 of 2**62", make(with_binding(1, dtype="float16", shape=[1 << 62]))
    yield "float32 [2**62, 4]", make(with_binding(1, shape=[1 << 62, 4]))
    yield "dims wrap uint64", make(with_binding(1, shape=[1 << 32, 1 << 32, 16]))
    yield "dims wrap to small", make(with_binding(1, shape=[1 << 62, 8, 0]))
    yield "dynamic with huge static", make(with_binding(1, shape=[-1, 1 << 62, 4]))
    yield "copy-back scratch huge", make(kv_meta(io_bindings=[
        *kv_meta()["io_bindings"][:2],
        {"name": "step_in", "dtype": "int64", "shape": [1 << 59], "is_input": True},
        *kv_meta()["io_bindings"][3:5],
        {"name": "step_out", "dtype": "int64", "shape": [1 << 59], "is_input": False}]))
    yield "dim beyond int64", make(kv_text_with(b"1").replace(b'"shape":[1]',
                                                               b'"shape":[9223372036854775808]'))
    # max_shape (TR03): the bounds of a dynamic binding
    dyn = dict(shape=[1, 2, -1, 4])
    yield "max_shape valid", make(with_binding(1, **dyn, max_shape=[1, 2, 16, 4]))
    yield "max_shape negative", make(with_binding(1, **dyn, max_shape=[1, 2, -1, 4]))
    yield "max_shape not ints", make(with_binding(1, **dyn, max_shape=[1, 2, 1.5, 4]))
    yield "max_shape not a list", make(with_binding(1, **dyn, max_shape=16))
    yield "max_shape rank", make(with_binding(1, **dyn, max_shape=[2, 16, 4]))
    yield "max_shape static dim", make(with_binding(1, **dyn, max_shape=[1, 3, 16, 4]))
    yield "max_shape on static", make(with_binding(1, max_shape=[1, 2, 1, 4]))
    yield "max_shape huge", make(with_binding(1, **dyn, max_shape=[1, 2, 1 << 62, 4]))
    yield "max_shape 2**63", make(with_binding(1, **dyn, max_shape=[1, 2, 1 << 63, 4]))
    tr02 = with_binding(1, **dyn, max_shape=[-5])
    del tr02["tte_version"]
    yield "max_shape in tr02 ignored", make(tr02, magic=b"TR02")
    yield "aliased pair max differs", make(kv_meta(io_bindings=[
        {**kv_meta()["io_bindings"][0], "shape": [1, 2, -1, 4], "max_shape": [1, 2, 8, 4]},
        *kv_meta()["io_bindings"][1:4],
        {**kv_meta()["io_bindings"][4], "shape": [1, 2, -1, 4], "max_shape": [1, 2, 9, 4]},
        kv_meta()["io_bindings"][5]]))
    # integrity
    yield "engine digest uppercase", make(kv_meta(engine_sha256="A" * 64))
    yield "engine digest short", make(kv_meta(engine_sha256="a" * 63))
    yield "engine digest wrong", make(kv_meta(engine_sha256="0" * 64))
    yield "engine digest not a string", make(kv_meta(engine_sha256=5))
    yield "unsealed", make(kv_meta(), seal=False)
    yield "tr02 with tte_version", make(kv_meta(), magic=b"TR02")
    yield from weights_cases()
    yield from engine_data_cases()
    # where a defect is reported: surrogates and non-finite numbers where they occur, NUL last
    kv = json.dumps(kv_meta()).encode()
    for name, extra in [("surrogate then NaN", b'"\\ud800","y":NaN'),
                        ("NaN then surrogate", b'NaN,"y":"\\ud800"'),
                        ("NUL then surrogate", b'"\\u0000","y":"\\ud800"'),
                        ("surrogate key", b'{"\\udc00":1}'),
                        ("surrogate then bad escape", b'"\\ud800\\x"'),
                        ("bad escape then surrogate", b'"\\x\\ud800"'),
                        ("high then short escape", b'"\\ud800\\u12"'),
                        ("duplicate then surrogate", b'{"a":1,"a":"\\ud800"}'),
                        ("surrogate deep", b"[" * 63 + b'"\\ud800"' + b"]" * 63),
                        ("NaN as a key", b'{NaN:1}'), ("NaN after a value", b"[1 NaN]"),
                        ("Infinity word", b"Infinit"), ("-NaN", b"-NaN"), ("tNaN", b"tNaN"),
                        ("1e999 deep", b"[" * 64 + b"1e999" + b"]" * 64),
                        ("words in an unterminated string",
                         b'"a surrogate U+D800 while parsing value - NaN'),
                        ("words then NaN", b'"surrogate"; NaN')]:
        yield f"order {name}", make(kv_text_with(extra))
    yield "order value then surrogate", make(b'1 "\\ud800"')
    yield "order value then deep", make(b"1 " + b"[" * 70)
    yield "json scalars at depth 64", make(kv_text_with(nested(63)))
    yield "kv text", make(kv)
    # integers: int64 for typed keys, any size elsewhere
    for name, extra in [("device_id 2**63", b"9223372036854775808"),
                        ("device_id -2**63-1", b"-9223372036854775809"),
                        ("device_id 2**64", b"18446744073709551616"),
                        ("device_id -2**63", b"-9223372036854775808")]:
        yield f"int {name}", make(kv.replace(b'"device_id": 0', b'"device_id": ' + extra))
    yield "int unused 2**70", make(kv_text_with(str(1 << 70).encode()))
    yield "int 400 digits", make(kv_text_with(b"1" * 400))
    yield "int shape 2**63", make(kv.replace(b'"shape": [1]', b'"shape": [9223372036854775808]'))
    # JSON edges both refuse under the same check
    for name, text in [("nan", b'{"x":NaN}'), ("1e400", b'{"x":1e400}'),
                       ("dup", b'{"x":1,"x":2}'), ("surrogate", b'{"x":"\\ud800"}'),
                       ("bad utf8", b'{"x":"\xff"}'), ("trailing", b"{} x"),
                       ("bom", b"\xef\xbb\xbf{}"), ("control char", b'{"x":"\x01"}'),
                       ("empty", b""), ("array root", b"[]"), ("tte 3.0", json.dumps(
                           kv_meta(tte_version=3.0)).encode()), ("tte true", json.dumps(
                           kv_meta(tte_version=True)).encode())]:
        yield f"json {name}", make(text)


MUTATION_TOKENS = [b"\\u0000", b"\\ud800", b"[[[[", b"]]", b"{}", b"NaN", b"-1", b"1e999",
                   b"9223372036854775807", b"18446744073709551616", b'"', b",", b":", b"\\",
                   b'"float32"', b'"int8"', b'"tte_version":3', b"true", b"null", b"\xc3",
                   b"\xff", b"0", b"3.0", b"4611686018427387904"]


def mutate(text: bytes, rng: random.Random) -> bytes:
    b = bytearray(text)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        at = rng.randrange(len(b) + 1)
        if op == 0 and b:
            b[min(at, len(b) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[at:at] = rng.choice(MUTATION_TOKENS)
        elif op == 2:
            del b[at:at + rng.randint(1, 8)]
        else:
            b[at:at] = b[at:at + rng.randint(1, 16)]
    return bytes(b)


def seeds():
    ring = H.ring_spec()
    yield "TR03", json.dumps(kv_meta()).encode(), b"E" * 20
    yield "TR03", json.dumps(kv_meta(tte_version=4, weights=[weight()])).encode(), b"E" * 20
    yield "TR03", json.dumps(kv_meta(tte_version=5, engine_kind="tensorrt", engine_data={
        "key": PLAN_KEY, "nbytes": 4096})).encode(), b""
    yield "TR03", json.dumps(ring.metadata(["x", "ring"]).to_json_dict()).encode(), b"P" * 32
    for f in ("upstream_tr01.blob", "upstream_tr02_kv.blob"):
        data = (FIXTURES / f).read_bytes()
        blob = B.parse(data)
        _, md_off, md_size, _, _, _ = struct.unpack(B.HEADER_FORMAT, data[:32])
        yield blob.magic.decode(), data[md_off:md_off + md_size], blob.engine


def mutation_cases(n=3000, seed=12):
    rng = random.Random(seed)
    all_seeds = list(seeds())
    for i in range(n):
        magic, text, engine = rng.choice(all_seeds)
        yield f"mutation {i}", make(mutate(text, rng), magic=magic.encode(), engine=engine)
    valid = make(kv_meta())
    for i in range(300):  # header and digest bytes, not resealed
        b = bytearray(valid)
        b[rng.randrange(64)] ^= 1 << rng.randrange(8)
        yield f"header flip {i}", bytes(b)


def python_verdict(data: bytes):
    """(accepted, check id, message): ("", "") when accepted."""
    try:
        B.parse(data)
        return True, "", ""
    except B.BlobError as e:
        return False, e.check, str(e)
    # anything else propagates: the test fails on it (python must raise only BlobError)


def cpp_verdict(data: bytes):
    code, why = runtime_lib.check_blob(data)
    return code == 0, runtime_lib.last_check(), why


def same_json_refusal(py, cpp) -> bool:
    """Both refuse the text as JSON (each naming one of its JSON-level defects)."""
    return not py[0] and not cpp[0] and py[1].startswith("json.") and cpp[1].startswith("json.")


def compare(cases):
    """The cases the readers judge differently: one accepts, or both refuse under different
    checks; and every check id seen (each must be a documented one)."""
    differ, seen = [], set()
    for name, data in cases:
        py, cpp = python_verdict(data), cpp_verdict(data)
        seen |= {py[1], cpp[1]} - {""}
        if py[:2] != cpp[:2] and not same_json_refusal(py, cpp):
            differ.append(f"{name}:\n  python: {py[1] or 'accepts'} {py[2]}\n"
                          f"  C++:    {cpp[1] or 'accepts'} {cpp[2]}")
    return differ, seen


def test_hostile_cases_are_judged_alike_check_for_check():
    differ, seen = compare(hostile_cases())
    assert differ == []
    assert seen <= set(B.CHECKS)


def test_hostile_cases_the_issue_names_are_refused():
    verdicts = {name: python_verdict(data) for name, data in hostile_cases()}
    assert verdicts["valid"] == (True, "", "")
    assert verdicts["nul dtype"][:2] == (False, "json.nul")
    assert '"float32\\u0000junk"' in verdicts["nul dtype"][2]
    assert verdicts["nesting 64 in a member"][:2] == (False, "json.depth")  # 65 containers
    assert verdicts["nesting 62 in a member"][0] is True
    assert verdicts["nesting 63 empty"][0] is True  # the root and 63 arrays: 64
    assert verdicts["json scalars at depth 64"][0] is True  # scalars do not nest
    assert verdicts["nesting 990 in a member"][1:] == (
        "json.depth", "metadata JSON nests arrays and objects deeper than 64")
    assert verdicts["nesting 5000 objects"][1] == "json.depth"
    assert verdicts["int8 of 2**63-1"][0] is True
    assert verdicts["float32 [2**62, 4]"][1:] == ("binding.too_large", (
        "binding 'tok' (float32 [4611686018427387904,4]) is larger than 2**63-1 bytes"))
    assert verdicts["dims wrap to small"][:2] == (False, "binding.too_large")  # 2**62*8*0
    assert verdicts["engine digest wrong"][1] == "blob.engine_digest"
    assert verdicts["engine digest wrong"][2].startswith(
        "engine payload SHA-256 mismatch: the metadata records 0000")
    # several JSON defects in one text: C++ names the first in document order, python the
    # first json.loads meets, then surrogates and NUL on the parsed value (blob_json says why)
    for case, py_id, cpp_id in (("order surrogate then NaN", "json.non_finite", "json.surrogate"),
                                ("order NaN then surrogate", "json.non_finite", "json.non_finite"),
                                ("order NUL then surrogate", "json.surrogate", "json.surrogate"),
                                ("order NaN as a key", "json.syntax", "json.syntax")):
        data = dict(hostile_cases())[case]
        assert (verdicts[case][1], cpp_verdict(data)[1]) == (py_id, cpp_id), case
    assert verdicts["int device_id 2**63"][1:] == ("metadata.type", (
        "metadata: 'device_id' must be int (int64), got 9223372036854775808"))
    assert verdicts["int device_id -2**63"][0] is True
    assert verdicts["int unused 2**70"][0] is True  # an unread key is not typed
    assert verdicts["int 400 digits"][1] == "json.non_finite"
    assert verdicts["max_shape valid"][0] is True
    assert verdicts["max_shape in tr02 ignored"][0] is True   # an extension key, as upstream
    for case, why in [("negative", "max_shape [1, 2, -1, 4] must hold integers >= 0"),
                      ("rank", "rank 3, the binding's is 4"),
                      ("static dim", "it differs from the binding's static dimensions"),
                      ("on static", "the binding has no dynamic (-1) dimension"),
                      ("huge", "it bounds the binding at more than 2**63-1 bytes")]:
        ok, check, text = verdicts[f"max_shape {case}"]
        assert (ok, check) == (False, "binding.max_shape") and text.endswith(why), (case, text)
    assert verdicts["max_shape static dim"][2] == (
        "binding 'tok' (float32 [1,2,-1,4] (max [1,3,16,4])) has max_shape [1,3,16,4]: it "
        "differs from the binding's static dimensions")
    assert verdicts["aliased pair max differs"][1] == "aliased.mismatch"


def test_the_check_ids_are_the_documented_ones():
    """CONTRACTS.md §1 lists every id of CHECKS (and nothing else in its check-id table)."""
    text = CONTRACTS.read_text()
    table = text[text.index("### Check ids"):]
    table = table[:table.index("\n#", 1)]
    documented = {line.split("`")[1] for line in table.splitlines()
                  if line.startswith("| `") and "." in line.split("`")[1]}
    assert documented == set(B.CHECKS)


def test_mutated_blobs_are_judged_alike_check_for_check():
    cases = list(mutation_cases())
    differ, seen = compare(cases)
    accepted = sum(python_verdict(d)[0] for _, d in cases)
    assert differ == []
    assert seen <= set(B.CHECKS)
    assert 0 < accepted < len(cases)  # the corpus reaches both verdicts
    assert len(seen) >= 20  # and many different checks
