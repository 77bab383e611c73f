"""The two blob readers agree (issue 12 item 4): one corpus — hand-made hostile metadata and
seeded mutations of valid blobs — goes through python's `blob.parse` and the C++ runtime's reader
(`tte_runtime_check_blob` through ctypes: parse, integrity, validation, binding plan), and each
input must be accepted by both or refused by both; python may raise nothing but `BlobError`.
Where both refuse, the messages are compared too (they are written to match check for check)."""
import hashlib
import json
import random
import struct
from pathlib import Path


import runtime_helpers as H
from torch_tensorrt_ext.contracts import blob as B
from torch_tensorrt_ext import runtime_lib

FIXTURES = Path(__file__).resolve().parent / "fixtures"


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


def kv_meta(**over):
    md = {
        "io_bindings": [
            {"name": "cache_in", "dtype": "float32", "shape": [1, 2, 8, 4], "is_input": True},
            {"name": "tok", "dtype": "float32", "shape": [1, 2, 1, 4], "is_input": True},
            {"name": "step_in", "dtype": "int64", "shape": [1], "is_input": True},
            {"name": "logits", "dtype": "float32", "shape": [1, 2], "is_input": False},
            {"name": "cache_out", "dtype": "float32", "shape": [1, 2, 8, 4], "is_input": False},
            {"name": "step_out", "dtype": "int64", "shape": [1], "is_input": False},
        ],
        "aliased_io": [{"output": "cache_out", "input": "cache_in", "kind": "kv_cache_update"}],
        "hardware_compatible": False, "device_id": 0, "serialized_metadata": "",
        "target_platform": "", "tte_version": 3, "engine_kind": "reference",
        "delegate_inputs": ["tok", "cache_in", "step_in"], "delegate_outputs": ["logits"],
        "buffers": [{"input": "cache_in", "fqn": "layers.0.attn.k_cache"},
                    {"input": "step_in", "fqn": "step"}],
        "copy_back": [{"output": "step_out", "input": "step_in"}],
    }
    md.update(over)
    return md


def with_binding(i, **over):
    md = kv_meta()
    md["io_bindings"][i] = {**md["io_bindings"][i], **over}
    return md


def nested(depth, leaf="1"):
    return ("[" * depth + leaf + "]" * depth).encode()


def kv_text_with(extra: bytes) -> bytes:
    """kv_meta's JSON with `"x": <extra>` as its first member."""
    return b'{"x":' + extra + b"," + json.dumps(kv_meta()).encode()[1:]


def hostile_cases():
    """(name, blob): what issue 12 found the readers disagreeing on, and their neighbours."""
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
    # integrity
    yield "engine digest uppercase", make(kv_meta(engine_sha256="A" * 64))
    yield "engine digest short", make(kv_meta(engine_sha256="a" * 63))
    yield "engine digest wrong", make(kv_meta(engine_sha256="0" * 64))
    yield "engine digest not a string", make(kv_meta(engine_sha256=5))
    yield "unsealed", make(kv_meta(), seal=False)
    yield "tr02 with tte_version", make(kv_meta(), magic=b"TR02")
    # JSON edges both refuse with the same message
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
    try:
        B.parse(data)
        return True, ""
    except B.BlobError as e:
        return False, str(e)
    # anything else propagates: the test fails on it (python must raise only BlobError)


def same_refusal(py_why: str, cpp_why: str) -> bool:
    """Equal messages; a JSON syntax error is the same one when placed at the same byte (each
    reader words the syntax error its own way, CONTRACTS.md §1)."""
    mark = "metadata JSON is truncated or malformed at byte "
    if py_why.startswith(mark) and cpp_why.startswith(mark):
        return py_why.split(":")[0] == cpp_why.split(":")[0]
    return py_why == cpp_why


def compare(cases):
    disagree, messages = [], []
    for name, data in cases:
        py_ok, py_why = python_verdict(data)
        code, cpp_why = runtime_lib.check_blob(data)
        if py_ok != (code == 0):
            disagree.append(f"{name}: python {'accepts' if py_ok else 'refuses: ' + py_why}; "
                            f"C++ {'accepts' if code == 0 else 'refuses: ' + cpp_why}")
        elif not py_ok and not same_refusal(py_why, cpp_why):
            messages.append(f"{name}:\n  python: {py_why}\n  C++:    {cpp_why}")
    return disagree, messages


def test_hostile_cases_are_refused_by_both_with_one_message():
    disagree, messages = compare(hostile_cases())
    assert disagree == [] and messages == []


def test_hostile_cases_the_issue_names_are_refused():
    verdicts = {name: python_verdict(data) for name, data in hostile_cases()}
    assert verdicts["valid"] == (True, "")
    assert verdicts["nul dtype"] == (False, (
        'metadata JSON holds a NUL character (\\u0000) in the string "float32\\u0000junk"; '
        'strings must not contain NUL'))
    assert verdicts["nesting 64 in a member"][0] is False  # root, then 64 arrays: level 65
    assert verdicts["nesting 62 in a member"] == (True, "")
    assert verdicts["nesting 63 empty"] == (True, "")
    assert verdicts["nesting 990 in a member"][1] == (
        "metadata JSON is truncated or malformed at byte 68: nesting deeper than 64 levels")
    assert verdicts["nesting 5000 objects"][1].endswith("nesting deeper than 64 levels")
    assert verdicts["int8 of 2**63-1"] == (True, "")
    assert verdicts["float32 [2**62, 4]"] == (False, (
        "binding 'tok' (float32 [4611686018427387904,4]) is larger than 2**63-1 bytes"))
    assert verdicts["dims wrap to small"][0] is False  # 2**62*8 wraps to 0 in uint64 before *0
    assert verdicts["engine digest wrong"][1].startswith("engine payload SHA-256 mismatch: the "
                                                        "metadata records 0000")


def test_mutated_blobs_are_judged_alike():
    cases = list(mutation_cases())
    disagree, messages = compare(cases)
    accepted = sum(python_verdict(d)[0] for _, d in cases)
    assert disagree == []
    assert messages == []
    assert 0 < accepted < len(cases)  # the corpus reaches both verdicts
