"""Native code's writes to fd 2 are captured; Python's own stderr lines keep going to the terminal."""

import os
import subprocess
import sys

SCRIPT = """
import os, sys
from mtp_tvm.support.native_log import native_stderr
with native_stderr() as out:
    os.write(2, b"Warning: from C++\\n")
    print("[ours] a progress line", file=sys.stderr)
    with native_stderr() as inner:  # nested: the outer capture gets everything
        os.write(2, b"Error: from LLVM\\n")
print(repr(out.text), inner is out)
"""


def test_native_lines_are_captured_and_ours_are_not():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    assert r.stderr == "[ours] a progress line\n"
    assert r.stdout.strip() == "'Warning: from C++\\nError: from LLVM\\n' True"


def test_verbose_captures_nothing():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True,
                       env={**os.environ, "MTP_TVM_VERBOSE": "1"})
    assert r.stderr == "Warning: from C++\n[ours] a progress line\nError: from LLVM\n"
    assert r.stdout.strip() == "'' False"
