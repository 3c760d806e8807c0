"""What TVM and LLVM print themselves (C++ ``LOG(WARNING)``, LLVM's own errors) goes to file descriptor 2, between
our lines: ``Warning: Unroll hint get ignore`` thirteen times in a bisect, LLVM's ``-mcpu=znver9 is not valid``
before our one-line message. ``native_stderr()`` sends fd 2 to a file while TVM works (Python's ``sys.stderr``
keeps the terminal), so a build keeps those lines in its run folder (``tvm.log``) instead;
``MTP_TVM_VERBOSE=1`` (``mtp-tvm --verbose``) lets them through as they come."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
import tempfile
import threading
from collections.abc import Iterator

VERBOSE_ENV = "MTP_TVM_VERBOSE"
_active: list[NativeOutput] = []  # the capture in progress (one per process: fd 2 is)
_lock = threading.Lock()


@dataclasses.dataclass
class NativeOutput:
    """What native code wrote to fd 2 during the capture (filled when it ends)."""

    text: str = ""


@contextlib.contextmanager
def native_stderr() -> Iterator[NativeOutput]:
    """Capture fd 2 for the duration; nested or concurrent uses share the outermost capture (its ``text`` gets
    everything), and ``MTP_TVM_VERBOSE=1`` captures nothing."""
    with _lock:
        outer = _active[0] if _active else None
        if outer is None and os.environ.get(VERBOSE_ENV) != "1":
            _active.append(NativeOutput())
    if outer is not None or not _active:
        yield outer or NativeOutput()
        return
    out = _active[0]
    python_stream = _python_stderr_on_fd2()
    saved = os.dup(2)
    keep = sys.stderr
    try:
        with tempfile.TemporaryFile() as f:
            sys.stderr.flush()
            if python_stream:  # our own stderr lines keep going where they went
                sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(saved), "wb"), encoding=keep.encoding,
                                              errors="backslashreplace", line_buffering=True)
            os.dup2(f.fileno(), 2)
            try:
                yield out
            finally:
                os.dup2(saved, 2)
                if python_stream:
                    sys.stderr.close()
                    sys.stderr = keep
                f.seek(0)
                out.text = f.read().decode(errors="replace")
    finally:
        os.close(saved)
        with _lock:
            _active.clear()


def _python_stderr_on_fd2() -> bool:
    """Whether ``sys.stderr`` writes to fd 2 (a terminal, a pipe), not to a replacement (pytest's capsys)."""
    try:
        return sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False
