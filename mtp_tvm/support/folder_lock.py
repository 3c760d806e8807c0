"""Advisory locks on a folder that several processes write (a tuning database): ``flock`` on a ``.lock`` file in
it, exclusive for a writer, shared for readers, never waited for. A second writer, or a reader while a writer
runs, is refused with a one-line error at once instead of interleaving appends or reading half a line; the lock
goes with the process (a killed writer leaves a ``.lock`` file, not a held lock)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path

from ..support.errors import UsageError

LOCK_FILE = ".lock"


@contextlib.contextmanager
def folder_lock(folder: Path, exclusive: bool, busy: str):
    """Hold ``folder/.lock`` (``exclusive`` or shared) for the ``with`` block; ``busy`` is the error when another
    process holds it the other way. A reader of a folder it cannot write, without a lock file, takes no lock:
    no writer can have been there either."""
    path = folder / LOCK_FILE
    flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        if exclusive:
            raise UsageError(f"cannot lock {folder}: {e.strerror}") from None
        try:
            fd = os.open(path, flags | os.O_RDONLY)
        except FileNotFoundError:
            yield
            return
        except OSError as e2:
            raise UsageError(f"cannot lock {folder}: {e2.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device put where the lock goes: never used
            raise UsageError(f"cannot lock {folder}: {path} is not a regular file")
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(busy) from None
        except OSError as e:  # a special file at the lock's path, or a file system without flock
            raise UsageError(f"cannot lock {path}: {e.strerror}") from None
        yield
    finally:
        os.close(fd)
