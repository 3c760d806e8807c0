"""One writer or many readers of a folder, never both, and nobody waits: the other side is one line."""

import contextlib
import os
import subprocess
import sys

import pytest

from mtp_tvm.support.errors import UsageError
from mtp_tvm.support.folder_lock import folder_lock

HOLD = """
import sys, time
from pathlib import Path
from mtp_tvm.support.folder_lock import folder_lock
with folder_lock(Path(sys.argv[1]), sys.argv[2] == "ex", "busy"):
    print("held", flush=True)
    time.sleep(60)
"""


@contextlib.contextmanager
def _held(folder, mode):
    """``folder``'s lock held by another process (``ex`` exclusive, ``sh`` shared) for the ``with`` block."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), mode], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        yield
    finally:
        p.kill()
        p.wait()


def _refused(folder, exclusive):
    with pytest.raises(UsageError, match="^busy$"):
        with folder_lock(folder, exclusive, "busy"):
            pass


def test_a_writer_excludes_writers_and_readers_of_other_processes(tmp_path):
    with _held(tmp_path, "ex"):
        _refused(tmp_path, True)
        _refused(tmp_path, False)
    with folder_lock(tmp_path, True, "busy"):  # the lock went with the killed process
        pass


def test_readers_share_and_exclude_a_writer(tmp_path):
    with _held(tmp_path, "sh"):
        with folder_lock(tmp_path, False, "busy"):
            pass
        _refused(tmp_path, True)


def test_a_special_file_at_the_lock_path_is_refused(tmp_path):
    os.mkfifo(tmp_path / ".lock")
    with pytest.raises(UsageError, match="is not a regular file"):
        with folder_lock(tmp_path, True, "busy"):
            pass
