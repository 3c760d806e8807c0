"""One writer or many readers of a folder, never both, and nobody waits: the other side is one line."""

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


def _holder(folder, mode):
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), mode], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_writer_excludes_writers_and_readers_of_other_processes(tmp_path):
    holder = _holder(tmp_path, "ex")
    try:
        for exclusive in (True, False):
            with pytest.raises(UsageError, match="^busy$"):
                with folder_lock(tmp_path, exclusive, "busy"):
                    pass
    finally:
        holder.kill()
        holder.wait()
    with folder_lock(tmp_path, True, "busy"):  # the lock went with the killed process
        pass


def test_readers_share_and_exclude_a_writer(tmp_path):
    holder = _holder(tmp_path, "sh")
    try:
        with folder_lock(tmp_path, False, "busy"):
            pass
        with pytest.raises(UsageError, match="^busy$"):
            with folder_lock(tmp_path, True, "busy"):
                pass
    finally:
        holder.kill()
        holder.wait()


def test_a_special_file_at_the_lock_path_is_refused(tmp_path):
    os.mkfifo(tmp_path / ".lock")
    with pytest.raises(UsageError, match="is not a regular file"):
        with folder_lock(tmp_path, True, "busy"):
            pass
