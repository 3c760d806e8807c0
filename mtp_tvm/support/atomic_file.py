"""Files written atomically: into ``<name>.tmp`` beside the target, renamed into place only when complete, so a
reader (or a later run) never sees half a file and a failed write leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from ..support.errors import UsageError


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` then rename ``tmp`` to ``path``; on failure the temp file is removed and the ``OSError``
    raised (callers that own a folder, like the dumps, report it their way)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_user_file(path: str | os.PathLike, write: Callable[[Path], None], what: str = "") -> None:
    """``atomic_write`` of a file the user named (a report, a plot, inputs): an error is one line,
    ``cannot write <what><path>: <reason>``."""
    try:
        atomic_write(path, write)
    except OSError as e:
        raise UsageError(f"cannot write {what}{path}: {e.strerror}") from None
