"""Run folders: where a dumping build writes, one new folder per build under ``dumps/`` (or ``$MTP_TVM_DUMPS``),
named ``<case>-<target>-<YYYYmmdd-HHMMSS>-<id>`` so concurrent processes never share one; ``index.json`` is its
table of contents and ``complete`` is written last, once its process will not write to it again (a check after
its verdict: ``compiler.driver.finish_run``). Folders do not grow without bound: a dumping build keeps the
newest ``retention()`` complete runs of its root (default 20), never one still being written or marked kept.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import stat
import uuid
from pathlib import Path

from ..support import atomic_file, plain_files
from ..support.env import env_int, env_path
from ..support.errors import UsageError

DUMPS_ENV = "MTP_TVM_DUMPS"  # the default dumps root (``dumps/``), e.g. a temporary folder for tests


COMPLETE_MARKER = "complete"


INDEX_FILE = "index.json"


def dumps_root(root: str | os.PathLike | None = None) -> Path:
    return Path(root) if root is not None else env_path(DUMPS_ENV) or Path("dumps")


def safe_name(name: str) -> str:
    return re.sub(r'[<>:"/\\|?*\s]', "_", name)


def new_run_dir(root: str | os.PathLike | None, label: str) -> Path:
    """Create ``<root>/<label>-<YYYYmmdd-HHMMSS>-<id>/``; never reuses a folder, even across processes."""
    root = dumps_root(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run = root / f"{safe_name(label)}-{stamp}-{uuid.uuid4().hex[:6]}"
        run.mkdir()
    except OSError as e:
        raise UsageError(f"cannot create dump folder under {root}: {e.strerror}") from None
    return run


def mark_complete(run: Path) -> None:
    """Write ``complete``: the run's process writes no more to it, and retention may remove it from now on."""
    try:
        plain_files.write_marker(run / COMPLETE_MARKER)
    except OSError as e:
        raise UsageError(f"cannot mark {run} complete: {e.strerror}") from None


def write_json(path: Path, data: dict) -> None:
    """Write JSON atomically (a temp file renamed into place)."""
    atomic_file.write_text(path, json.dumps(data, indent=1))


def update_index(run: Path, **sections) -> dict:
    """Add top-level sections (e.g. the golden check's verdict) to a finished run's index, and re-render it."""
    from ..instrument.report import write_html

    index = json.loads(plain_files.read_text(run / INDEX_FILE))
    index.update(sections)
    write_json(run / INDEX_FILE, index)
    write_html(run, index)
    return index


KEPT_MARKER = "kept"  # ``mtp-tvm dumps keep RUN``: never pruned
KEEP_ENV = "MTP_TVM_DUMPS_KEEP"  # how many complete runs a dumping build leaves in its root (0: all)
DEFAULT_KEEP = 20
MAX_KEEP = 1_000_000


def retention() -> int:
    """How many complete runs a dumping build keeps in its root: ``$MTP_TVM_DUMPS_KEEP``, default 20, 0 keeps all."""
    return env_int(KEEP_ENV, 0, MAX_KEEP, DEFAULT_KEEP, " (runs to keep; 0 keeps all)")


def _is_run_folder(entry: Path) -> bool:
    """A real folder of the root: a symlink (which may lead out of the root) or a special file is never one."""
    try:
        return stat.S_ISDIR(entry.lstat().st_mode)
    except OSError:  # removed meanwhile
        return False


def run_folders(root: Path) -> list[Path]:
    """The run folders directly under ``root`` (``_is_run_folder``); an unreadable root is one line."""
    try:
        return [entry for entry in root.iterdir() if _is_run_folder(entry)] if root.is_dir() else []
    except OSError as e:
        raise UsageError(f"cannot read the dumps root {root}: {e.strerror}") from None


def prune(root: str | os.PathLike | None = None, keep: int | None = None,
          older_than: datetime.timedelta | None = None) -> list[Path]:
    """Remove complete runs beyond the newest ``keep`` and those finished more than ``older_than`` ago; returns
    what was removed. A run without its ``complete`` marker (being written, or interrupted), a run marked
    ``kept`` and anything in the root that is not a real folder (a symlink to a folder elsewhere) are never
    touched; a run that cannot be removed (a read-only root) is one line."""
    root = dumps_root(root)
    finished = {}
    for run in run_folders(root):
        try:
            if not os.path.lexists(run / KEPT_MARKER):
                finished[run] = (run / COMPLETE_MARKER).lstat().st_mtime
        except OSError:  # not complete, or another process is removing it
            continue
    runs = sorted(finished, key=finished.get, reverse=True)  # newest first
    doomed = set(runs[keep:]) if keep is not None else set()
    if older_than is not None:
        cutoff = datetime.datetime.now().timestamp() - older_than.total_seconds()
        doomed |= {r for r in runs if finished[r] < cutoff}
    for run in sorted(doomed):
        try:
            (run / COMPLETE_MARKER).unlink(missing_ok=True)  # first: a half-removed run never looks complete
        except OSError as e:
            raise UsageError(f"cannot remove {run}: {e.strerror}") from None
        shutil.rmtree(run, ignore_errors=True)  # never follows a link inside the run either
    return sorted(doomed)


def keep_run(run: Path) -> Path:
    """Mark ``run`` so that pruning never removes it."""
    marker = run / KEPT_MARKER
    try:
        plain_files.write_marker(marker, "kept by mtp-tvm dumps keep\n")
    except OSError as e:
        raise UsageError(f"cannot mark {run} kept: {e.strerror}: {marker}") from None
    return marker
