"""Environment variables are validated where they are read: a bad value is one line naming
the variable and exit 2, before any work; no value makes a command hang at exit or warn falsely."""

import os
import re
import subprocess
import sys

import pytest

from mtp_tvm.cli import main
from mtp_tvm.support.env import env_int, env_path
from mtp_tvm.support.errors import UsageError


@pytest.mark.parametrize("text", ["", " ", "abc", "-1", "1.5", "0x10", "1e3", "3_0", "٣", "0", "1001"])
def test_env_int_refuses_anything_but_a_whole_number_in_range(monkeypatch, text):
    monkeypatch.setenv("MTP_TEST_INT", text)
    with pytest.raises(UsageError, match=r"^MTP_TEST_INT must be an integer in \[1, 1000\] \(why\), got "):
        env_int("MTP_TEST_INT", 1, 1000, 7, " (why)")


def test_env_int_default_and_values(monkeypatch):
    monkeypatch.delenv("MTP_TEST_INT", raising=False)
    assert env_int("MTP_TEST_INT", 1, 9, 7) == 7
    monkeypatch.setenv("MTP_TEST_INT", " 09 ")
    assert env_int("MTP_TEST_INT", 1, 9, 7) == 9


def test_env_path_refuses_empty(monkeypatch):
    monkeypatch.delenv("MTP_TEST_PATH", raising=False)
    assert env_path("MTP_TEST_PATH") is None
    monkeypatch.setenv("MTP_TEST_PATH", "")
    with pytest.raises(UsageError, match="MTP_TEST_PATH is set but empty"):
        env_path("MTP_TEST_PATH")


CORES = len(os.sched_getaffinity(0))


@pytest.mark.parametrize("name, value, message", [
    ("TVM_NUM_THREADS", "1000", rf"TVM_NUM_THREADS must be an integer in \[1, {CORES}\]"),
    ("TVM_NUM_THREADS", "0", "TVM_NUM_THREADS must be an integer"),
    ("TVM_NUM_THREADS", "abc", "TVM_NUM_THREADS must be an integer"),
    ("TVM_NUM_THREADS", "-1", "TVM_NUM_THREADS must be an integer"),
    ("TVM_NUM_THREADS", "", "TVM_NUM_THREADS must be an integer"),
    ("MTP_TVM_DUMPS_KEEP", "-1", r"MTP_TVM_DUMPS_KEEP must be an integer in \[0, 1000000\] \(runs to keep"),
    ("MTP_TVM_DUMPS_KEEP", "", "MTP_TVM_DUMPS_KEEP must be an integer"),
    ("MTP_TVM_DUMPS_KEEP", "99999999999999999999", "MTP_TVM_DUMPS_KEEP must be an integer"),
    ("MTP_TVM_DUMPS", "", "MTP_TVM_DUMPS is set but empty"),
    ("MTP_TVM_TUNED_ROOT", "", "MTP_TVM_TUNED_ROOT is set but empty"),
])
def test_a_bad_environment_is_one_line_exit_2_before_the_build(monkeypatch, capsys, tmp_path, name, value,
                                                                 message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(name, value)
    argv = ["check", "--case", "norm", "--preset", "tiny"] + (["--dump-passes"] if "DUMPS" in name else []) + (
        ["--schedule", "tuned"] if "TUNED" in name else [])
    assert main(argv) == 2
    out = capsys.readouterr()
    assert "PASSED" not in out.out and "FAILED" not in out.out, out.out  # refused before the build
    assert out.err.startswith("mtp-tvm: error: ") and out.err.count("\n") == 1
    assert re.search(message, out.err), out.err
    assert not list(tmp_path.iterdir())  # nothing written (no dumps/ in the current folder)


@pytest.mark.slow  # subprocesses that import TVM
def test_tvm_num_threads_1000_exits_at_once_and_a_valid_count_warns_nothing(tmp_path):
    """The issue's instance: TVM_NUM_THREADS=1000 printed PASSED and never exited."""
    cmd = [sys.executable, "-m", "mtp_tvm", "check", "--case", "norm", "--preset", "tiny"]
    bad = subprocess.run(cmd, env={**os.environ, "TVM_NUM_THREADS": "1000"}, capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert bad.returncode == 2 and "TVM_NUM_THREADS must be an integer" in bad.stderr
    good = subprocess.run(cmd, env={**os.environ, "TVM_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert good.returncode == 0 and "PASSED" in good.stdout and "already runs" not in good.stderr, good.stderr
