"""Only regular files are read or marked in shared folders: a FIFO, a device or a symlink is refused at once."""

import os

import pytest

from mtp_tvm.support.plain_files import read_text, write_marker


def test_regular_files_are_read_and_marked(tmp_path):
    (tmp_path / "a").write_text("text")
    assert read_text(tmp_path / "a") == "text"
    write_marker(tmp_path / "m", "x")
    write_marker(tmp_path / "m", "")
    assert (tmp_path / "m").read_text() == ""


def test_a_fifo_or_device_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        read_text(tmp_path / "fifo")
    with pytest.raises(OSError):  # no reader: ENXIO, never a wait
        write_marker(tmp_path / "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        read_text("/dev/zero")


def test_a_marker_is_never_written_through_a_symlink(tmp_path):
    (tmp_path / "target").write_text("precious")
    (tmp_path / "m").symlink_to(tmp_path / "target")
    with pytest.raises(OSError):
        write_marker(tmp_path / "m")
    assert (tmp_path / "target").read_text() == "precious"
