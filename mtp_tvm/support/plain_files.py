"""Reading and marking files in folders other people share (dump roots) or a user names (checkpoint shards,
calibration files): only regular files are opened. A FIFO where a file is expected would block the reader (or a
marker's writer) for ever and a character device (``/dev/zero``) would never end, so either is refused with an
``OSError`` the caller turns into one line."""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path
from typing import BinaryIO


def _refuse_special(fd: int, path: Path) -> None:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file; refusing to open it", str(path))


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading in binary, when it is a regular file (a symlink to one is followed: the caller
    confines paths); anything else is refused before a byte is read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once, then is refused
    _refuse_special(fd, Path(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_text(path: str | os.PathLike) -> str:
    """``path``'s text, when it is a regular file (``open_regular``)."""
    with io.TextIOWrapper(open_regular(path), encoding="utf-8") as f:
        return f.read()


def write_marker(path: str | os.PathLike, text: str = "") -> None:
    """Create or overwrite the small marker file ``path`` (``complete``, ``kept``); a symlink or special file
    there is refused, never written through."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    _refuse_special(fd, Path(path))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.truncate()
        f.write(text)
