"""`tte.executorch.load` on files that are not sound `.pte`s: a Python exception, never a dead
process.

Each hostile file is loaded in a child process (one child for all of them, printing one JSON
line per file as it goes), so an abort would show up as the child's exit status instead of
killing pytest; the test asserts the child exited 0 and the exact exception of each file.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from torch_tensorrt_ext.executorch.saving.lower import save_pte

REEXPORT = 're-export it (torch_tensorrt.save(..., output_format="executorch"))'

_CHILD = textwrap.dedent("""
    import json, sys
    import torch_tensorrt_ext.executorch as tx
    from torch_tensorrt_ext.executorch.running import log_sink
    for path in sys.argv[1:]:
        try:
            tx.load(path)
            out = {"path": path, "type": None, "message": None}
        except Exception as e:
            out = {"path": path, "type": type(e).__name__, "message": str(e),
                   "mro": [c.__name__ for c in type(e).__mro__]}
        print(json.dumps(out), flush=True)
    print(json.dumps({"emitter": log_sink.current_emitter_library()}), flush=True)
""")


class _Acc(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("acc", torch.zeros(1, 4))

    def forward(self, x):
        self.acc.add_(x)
        return self.lin(x) + self.acc


def _files(d: Path) -> dict:
    ep = torch.export.export(_Acc().eval(), (torch.randn(1, 4),))
    good = d / "good.pte"
    save_pte(ep, str(good))
    data = good.read_bytes()
    assert data[4:8] == b"ET12" and data[8:12] == b"eh00"
    program_size = int.from_bytes(data[16:24], "little")
    base = int.from_bytes(data[24:32], "little")
    seg = int.from_bytes(data[32:40], "little")
    assert seg > 0 and base + seg == len(data), "the fixture needs a segment to truncate"
    gen = torch.Generator().manual_seed(0)
    rand = bytes(torch.randint(0, 256, (4096,), generator=gen, dtype=torch.uint8).tolist())
    files = {
        "random": rand,
        "non_utf8_identifier": data[:4] + b"\xfd\xfe\xff\x80" + data[8:],
        "empty": b"",
        "short": data[:5],
        "truncated_in_extended_header": data[:20],
        "truncated_in_program": data[:program_size // 2],
        "truncated_in_segments": data[:base + seg // 2],
        "root_offset_outside": (len(data) + 8).to_bytes(4, "little") + data[4:],
        "bad_extended_header_length": data[:12] + (10 ** 6).to_bytes(4, "little") + data[16:],
        "zeroed_flatbuffer": data[:48] + bytes(program_size - 48) + data[program_size:],
        "garbage_flatbuffer": data[:48] + rand[:program_size - 48] + data[program_size:],
        # ET12 header and a sound flatbuffer, but an operator name that is not UTF-8: gets past
        # every header check into ExecuTorch, which logs the name while refusing the method.
        "non_utf8_operator": data.replace(b"aten::addmm", b"aten::\xffddmm"),
    }
    assert files["non_utf8_operator"] != data
    paths = {}
    for name, content in files.items():
        (d / f"{name}.pte").write_bytes(content)
        paths[name] = d / f"{name}.pte"
    (d / "a_directory.pte").mkdir()
    paths["directory"] = d / "a_directory.pte"
    paths["missing"] = d / "missing.pte"
    return {"good": good, "paths": paths, "program_size": program_size, "base": base,
            "seg": seg, "n": len(data)}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    f = _files(d)
    names = list(f["paths"])
    child = subprocess.run([sys.executable, "-c", _CHILD] + [str(f["paths"][n]) for n in names],
                           capture_output=True, timeout=600)
    lines = [json.loads(x) for x in child.stdout.decode().splitlines() if x.startswith("{")]
    results = {names[i]: lines[i] for i in range(min(len(names), len(lines)))}
    return {"f": f, "rc": child.returncode, "stderr": child.stderr, "results": results,
            "tail": lines[len(names)] if len(lines) > len(names) else None}


def test_the_child_survives_every_file(hostile):
    assert hostile["rc"] == 0, hostile["stderr"][-3000:].decode("utf-8", "replace")
    assert set(hostile["results"]) == set(hostile["f"]["paths"])


def _expect(hostile, name: str, message: str, type_: str = "PteError"):
    p = hostile["f"]["paths"][name]
    r = hostile["results"].get(name)
    assert r is not None, f"the child died before reporting {name} (exit {hostile['rc']})"
    assert (r["type"], r["message"]) == (type_, message.format(p=p))
    return r


def test_random_bytes(hostile):
    r = _expect(hostile, "random", "{p}: is not an ExecuTorch program: its flatbuffer file "
                "identifier is b'C\\xfb\\xc3g', expected b'ET12' (not a .pte, a corrupt "
                "one, or one from an incompatible ExecuTorch)")
    assert "ValueError" in r["mro"]


def test_non_utf8_identifier(hostile):
    _expect(hostile, "non_utf8_identifier", "{p}: is not an ExecuTorch program: its flatbuffer "
            "file identifier is b'\\xfd\\xfe\\xff\\x80', expected b'ET12' (not a .pte, a "
            "corrupt one, or one from an incompatible ExecuTorch)")


def test_empty_and_short(hostile):
    _expect(hostile, "empty", "{p}: is empty (0 bytes), not an ExecuTorch program; " + REEXPORT)
    _expect(hostile, "short", "{p}: is 5 bytes, shorter than a flatbuffer header (8 bytes): "
            "truncated or not a .pte; " + REEXPORT)


def test_truncated(hostile):
    f = hostile["f"]
    _expect(hostile, "truncated_in_extended_header", "{p}: flatbuffer root offset 60 is "
            "outside the file (20 bytes): truncated or corrupt; " + REEXPORT)
    _expect(hostile, "bad_extended_header_length", "{p}: extended header length 1000000 is "
            f"invalid for a {f['n']}-byte file: truncated or corrupt; " + REEXPORT)
    _expect(hostile, "truncated_in_program", "{p}: is truncated: its header says the program "
            f"is {f['program_size']} bytes, the file has {f['program_size'] // 2}; " + REEXPORT)
    _expect(hostile, "truncated_in_segments", "{p}: is truncated: its header puts segment data "
            f"at bytes {f['base']}..{f['base'] + f['seg']}, the file has "
            f"{f['base'] + f['seg'] // 2}; " + REEXPORT)


def test_corrupt_flatbuffer_is_refused_by_executorch_verification(hostile):
    f = hostile["f"]
    _expect(hostile, "root_offset_outside", "{p}: flatbuffer root offset "
            f"{f['n'] + 8} is outside the file ({f['n']} bytes): truncated or corrupt; "
            + REEXPORT)
    for name in ("zeroed_flatbuffer", "garbage_flatbuffer"):
        _expect(hostile, name, "{p}: ExecuTorch refused the program (Failed to load program, "
                "error: 0x:23); its log line on stderr says why. The file is corrupt or was not "
                "written by this ExecuTorch; re-export it")
    assert b"Verification failed; data may be truncated or corrupt" in hostile["stderr"]
    assert b"Program validation failed: likely a corrupt file" in hostile["stderr"]


def test_directory_and_missing_file(hostile):
    _expect(hostile, "directory", "{p}: is a directory, not a .pte file")
    _expect(hostile, "missing", "{p}: no such file; pass the path of an existing .pte")


def test_non_utf8_log_line_goes_to_fd2_instead_of_killing_the_process(hostile):
    # The message of a refused method belongs to the runtime (another change words it); what
    # this test owns: a Python exception naming the method, and the raw bytes on fd 2.
    r = hostile["results"].get("non_utf8_operator")
    assert r is not None, f"the child died loading it (exit {hostile['rc']})"
    assert r["type"] is not None and "RuntimeError" in r["mro"] and "forward" in r["message"]
    assert b"Missing operator: [2] aten::\xffddmm.out" in hostile["stderr"]
    # the emitter is the runtime library's (informational lines filtered), never the pybind one
    assert hostile["tail"]["emitter"].endswith("/libtte_runtime.so"), hostile["tail"]


def test_unguarded_executorch_dies_on_the_same_file(hostile):
    """Why log_sink exists: executorch 1.5.1's own Python runtime aborts on this file. When an
    ExecuTorch release stops doing so, this fails, and log_sink's reroute can go."""
    path = hostile["f"]["paths"]["non_utf8_operator"]
    code = ("from executorch.runtime import Runtime\n"
            f"Runtime.get().load_program({str(path)!r}).load_method('forward')\n")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=600)
    assert child.returncode == -6, child.stderr[-2000:]
    assert b"UnicodeDecodeError" in child.stderr


def test_unknown_method_names_the_file_and_its_methods(hostile):
    from torch_tensorrt_ext.executorch import load
    from torch_tensorrt_ext.executorch.running.program import NoSuchMethodError
    good = hostile["f"]["good"]
    with pytest.raises(NoSuchMethodError) as e:
        load(good, method="nosuch")
    assert str(e.value) == f"{good} has no method 'nosuch'; it has ['forward']"
    assert isinstance(e.value, KeyError)
    prog = load(good)
    with pytest.raises(NoSuchMethodError) as e:
        prog.run(torch.zeros(1, 4), method="nosuch")
    assert str(e.value) == f"{good} has no method 'nosuch'; it has ['forward']"


def test_log_sink_without_pal_symbols_warns_and_reports_unrouted(monkeypatch):
    from torch_tensorrt_ext.executorch.running import log_sink
    monkeypatch.setattr(log_sink, "_routed", False)
    monkeypatch.setattr(log_sink, "_pal_table", lambda: None)
    with pytest.warns(RuntimeWarning, match="^torch_tensorrt_ext could not find ExecuTorch's "
                      "PAL table .* a .pte holding non-UTF-8 strings can abort this process$"):
        assert log_sink.route_logs_to_fd2() is False
    assert log_sink.routed() is False


def test_the_loader_reads_the_program_flatbuffer_but_no_segment(tmp_path):
    """`tte.executorch.load` hands ExecuTorch the path and reads, itself, only the header and
    the program flatbuffer: the segments (engines, weights) are read once, by the runtime."""
    from torch_tensorrt_ext.executorch.inspecting.pte_check import read_pte_program
    ep = torch.export.export(_Acc().eval(), (torch.randn(1, 4),))
    save_pte(ep, str(tmp_path / "m.pte"))
    data = (tmp_path / "m.pte").read_bytes()
    program_size = int.from_bytes(data[16:24], "little")
    assert 0 < program_size < len(data)
    assert read_pte_program(tmp_path / "m.pte") == data[:program_size]
