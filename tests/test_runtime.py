"""The runtime's thread count follows the cores the process may use; TVM_NUM_THREADS overrides it."""

import os
import subprocess
import sys

import pytest

SCRIPT = """
import os, sys
if sys.argv[1] != "all":
    os.sched_setaffinity(0, {{int(c) for c in sys.argv[1].split(",")}})
import mtp_tvm
from mtp_tvm.compiler.runtime import runtime_threads
mtp_tvm.compile(case="norm", preset="tiny").vm
print(runtime_threads())
"""


def _threads(cores: str, **env) -> int:
    base = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(), cores], env={**base, **env}, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.strip().splitlines()[-1])


def test_every_usable_core_by_default():
    assert _threads("all") == len(os.sched_getaffinity(0))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to narrow the affinity to one")
def test_a_narrowed_affinity_narrows_the_pool():
    assert _threads(str(min(os.sched_getaffinity(0)))) == 1


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="with one core the default is already 1")
def test_tvm_num_threads_overrides():
    assert _threads("all", TVM_NUM_THREADS="1") == 1  # (TVM caps it at the cores there are)
