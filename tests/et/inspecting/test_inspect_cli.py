"""`torch-tensorrt-ext inspect MODEL.pte` on programs written by `torch_tensorrt.save` (reference
and TensorRT-RTX engines), and on files that are not programs."""
from __future__ import annotations

import json
import re

import pytest
from e2e_models import MODELS
from rtx_env import built_engine_kind, torch_tensorrt_or_skip
from upstream_matrix import compiled, reference_compiled

from torch_tensorrt_ext import cli

pytestmark = pytest.mark.inspects_pte


def _save(tmp_path, trt, name):
    torch_tensorrt = torch_tensorrt_or_skip()
    path = tmp_path / f"{name}.pte"
    torch_tensorrt.save(trt, str(path), output_format="executorch",
                        arg_inputs=list(MODELS[name][1](0)))
    return path


def test_inspect_json_names_every_buffer_kind_and_binding(tmp_path, capsys):
    _, trt = reference_compiled("two_submodules")
    path = _save(tmp_path, trt, "two_submodules")
    assert cli.main(["inspect", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    (method,) = info["methods"]
    assert method["name"] == "forward"
    (delegate,) = method["delegates"]
    assert (delegate["magic"], delegate["engine_kind"]) == ("TR03", "reference")
    buffers = {b["fqn"]: b for b in method["buffers"]}
    # the reference engine copies the ring back itself: no copy op in the program for either
    assert {f: (b["kind"], b["nbytes"], b["initial_value"], b["program_copy_bytes"], b["device"])
            for f, b in buffers.items()} == {"left.k": ("kv_alias", 256, True, 0, "cpu"),
                                            "right.ring": ("copy_back", 48, True, 0, "cpu")}
    assert [list(p) for p in delegate["aliased_io"]] == [["output1", buffers["left.k"]["binding"]]]
    assert [p[1] for p in delegate["copy_back"]] == [buffers["right.ring"]["binding"]]


def test_inspect_text_for_a_tensorrt_engine(tmp_path, capsys):
    _, _, _, trt = compiled("kv_index_copy")
    path = _save(tmp_path, trt, "kv_index_copy")
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "method forward: 1 delegate(s), 1 mutable buffer(s)"
    assert out[1].startswith(f"  delegate 0: TensorRTBackend TR03 {built_engine_kind()} engine, "
                             "0 bytes, ")           # the plan is named data (TR03 version 5)
    assert re.fullmatch(r"    plan: \d+ bytes of named data tte/sha256/[0-9a-f]{64}, in the \.pte",
                        out[2]), out[2]
    assert out[4].split() == ["k", "kv_alias", "float32", "[1,", "2,", "8,", "4]", "256", "cuda:0",
                              "yes", "0", "0", "delegate", "0:b_k"]


@pytest.mark.writes_bad_pte
def test_inspect_refuses_what_is_not_a_pte(tmp_path, capsys):
    bad = tmp_path / "junk.pte"
    bad.write_bytes(b"junk\n")
    assert cli.main(["inspect", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"torch-tensorrt-ext inspect: {bad}: is 5 bytes, shorter than a "
                          "flatbuffer header")
