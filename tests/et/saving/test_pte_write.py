"""`.pte` writes are all or nothing: `pte_write.write_atomic` and `save_pte`."""
from __future__ import annotations

import errno
import os
import stat

import pytest

from torch_tensorrt_ext.executorch.saving import lower
from torch_tensorrt_ext.executorch.saving.pte_write import (DestinationError, check_destination,
                                                     write_atomic)

OLD = b"the previous .pte, which must survive a failed write"


def _disk_full_after(n: int):
    def write(f):
        f.write(b"x" * n)
        raise OSError(errno.ENOSPC, "No space left on device")
    return write


def test_success_replaces_content_and_leaves_only_the_destination(tmp_path):
    dest = tmp_path / "m.pte"
    dest.write_bytes(OLD)
    assert write_atomic(dest, lambda f: f.write(b"new bytes")) == dest
    assert dest.read_bytes() == b"new bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pte"]


def test_new_file_gets_the_mode_open_would_give(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "m.pte", lambda f: f.write(b"x"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "m.pte").stat().st_mode) == 0o640


def test_failure_mid_write_keeps_the_old_file_and_no_temp_file(tmp_path):
    dest = tmp_path / "m.pte"
    dest.write_bytes(OLD)
    with pytest.raises(OSError) as e:
        write_atomic(dest, _disk_full_after(1000))
    assert e.value.errno == errno.ENOSPC
    assert dest.read_bytes() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pte"]


def test_interrupt_mid_write_leaves_no_destination_and_no_temp_file(tmp_path):
    def write(f):
        f.write(b"partial")
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "m.pte", write)
    assert list(tmp_path.iterdir()) == []


class _FailingManager:
    """Stands in for ExecutorchProgramManager: serialisation fails after some bytes."""

    def write_to_file(self, f):
        _disk_full_after(4096)(f)


def test_save_pte_failure_keeps_the_old_pte(tmp_path, monkeypatch):
    monkeypatch.setattr(lower, "to_executorch", lambda programs, **kw: _FailingManager())
    dest = tmp_path / "model.pte"
    dest.write_bytes(OLD)
    with pytest.raises(OSError) as e:
        lower.save_pte(object(), str(dest))
    assert e.value.errno == errno.ENOSPC
    assert dest.read_bytes() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pte"]


def test_check_destination_refuses_what_cannot_be_written(tmp_path):
    (tmp_path / "file").write_bytes(b"")
    cases = {
        tmp_path / "nodir" / "m.pte": f"{tmp_path / 'nodir' / 'm.pte'}: directory "
                                      f"{tmp_path / 'nodir'} does not exist; create it first",
        tmp_path: f"{tmp_path}: is a directory; give a file path such as "
                  f"{tmp_path / 'model.pte'}",
        tmp_path / "file" / "m.pte": f"{tmp_path / 'file' / 'm.pte'}: {tmp_path / 'file'} is "
                                     f"not a directory",
    }
    for path, message in cases.items():
        with pytest.raises(DestinationError) as e:
            check_destination(path)
        assert str(e.value) == message
    assert check_destination(tmp_path / "ok.pte") == tmp_path / "ok.pte"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # the probe is gone


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a mode 0o500 directory")
def test_check_destination_refuses_a_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(DestinationError) as e:
        check_destination(ro / "m.pte")
    assert str(e.value) == f"{ro / 'm.pte'}: cannot write in directory {ro} (Permission denied)"


def test_temp_files_of_killed_writers_are_removed_by_the_next_write(tmp_path):
    import subprocess
    import sys
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f".m.pte.{dead}.0a1b2c3d.tte-tmp"
    live = tmp_path / f".m.pte.{os.getpid()}.0a1b2c3d.tte-tmp"   # a writer still running
    other = tmp_path / f".other.pte.{dead}.0a1b2c3d.tte-tmp"     # another destination's
    for p in (stale, live, other):
        p.write_bytes(b"partial")
    write_atomic(tmp_path / "m.pte", lambda f: f.write(b"new"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.pte", live.name, other.name])
