"""`torch-tensorrt-ext demo` refuses meaningless arguments before exporting and cleans up after
itself."""
from __future__ import annotations

import tempfile

import pytest

from torch_tensorrt_ext import cli
from torch_tensorrt_ext.demo import pipeline
from torch_tensorrt_ext.demo import run as demo_run


@pytest.fixture
def no_export(monkeypatch):
    def compile_and_save(*a, **kw):
        raise AssertionError("the demo exported before refusing its arguments")
    monkeypatch.setattr(pipeline, "compile_and_save", compile_and_save)


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def _refused(capsys, argv, message):
    assert cli.main(["demo"] + argv) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"torch-tensorrt-ext demo: error: {message}\n")


@pytest.mark.parametrize("steps", ["0", "-1"])
def test_no_steps_is_refused(capsys, no_export, steps):
    _refused(capsys, ["--steps", steps, "--json"], f"--steps {steps}: must be at least 1 "
             "(each step is one decode step compared against eager)")


def test_more_steps_than_cache_positions_is_refused(capsys, no_export):
    assert demo_run.CACHE_POSITIONS == 16
    _refused(capsys, ["--steps", "17"],
             "--steps 17: the decoder's KV cache holds 16 positions; use 1..16")


def test_no_layers_is_refused(capsys, no_export):
    _refused(capsys, ["--layers", "0"], "--layers 0: must be at least 1")


def test_unwritable_pte_is_refused(capsys, no_export, tmp_path):
    (tmp_path / "file").write_bytes(b"")
    _refused(capsys, ["--pte", str(tmp_path / "nodir" / "d.pte")],
             f"--pte {tmp_path / 'nodir' / 'd.pte'}: directory {tmp_path / 'nodir'} does not "
             f"exist; create it first")
    _refused(capsys, ["--pte", str(tmp_path)],
             f"--pte {tmp_path}: is a directory; give a file path such as "
             f"{tmp_path / 'model.pte'}")
    _refused(capsys, ["--pte", str(tmp_path / "file" / "d.pte")],
             f"--pte {tmp_path / 'file' / 'd.pte'}: {tmp_path / 'file'} is not a directory")


def test_failed_run_removes_its_temp_dir(own_tmp, monkeypatch):
    def compile_and_save(torch_tensorrt, model, args, path, engine, say):
        open(path, "wb").close()
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(pipeline, "compile_and_save", compile_and_save)
    with pytest.raises(OSError, match="No space left on device"):
        demo_run.run_demo(steps=1, layers=1)
    assert list(own_tmp.glob("tte-demo-*")) == []


def test_run_removes_its_temp_dir_and_keeps_an_explicit_pte(own_tmp, tmp_path, capsys):
    assert cli.main(["demo", "--steps", "2", "--layers", "1"]) == 0
    out = capsys.readouterr().out
    assert "\n.pte: in a temporary directory, removed (--pte PATH keeps it)\n" in out
    assert "step 1: parity with eager" in out
    assert list(own_tmp.glob("tte-demo-*")) == []
    kept = tmp_path / "kept.pte"
    r = demo_run.run_demo(steps=1, layers=1, pte=str(kept))
    assert r["pte"] == str(kept) and r["parity"] is True
    assert kept.read_bytes()[4:8] == b"ET12"
    assert list(own_tmp.glob("tte-demo-*")) == []


def test_an_engine_this_machine_cannot_run_is_refused(capsys, no_export, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _refused(capsys, ["--engine", "tensorrt"],
             "--engine tensorrt: TensorRT engines run on a CUDA GPU and this machine has none; "
             "use --engine reference (runs on CPU) or --engine tensorrt-rtx (builds the engines "
             "ahead of time)")
