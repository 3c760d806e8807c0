"""Run folders: where a dumping build writes, one new folder per build under ``dumps/`` (or ``$MTP_TVM_DUMPS``),
named ``<case>-<target>-<YYYYmmdd-HHMMSS>-<id>`` so concurrent processes never share one; ``index.json`` is its
table of contents and ``complete`` is written last.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import uuid
from pathlib import Path

from ..support import atomic_file
from ..support.errors import UsageError

DUMPS_ENV = "MTP_TVM_DUMPS"  # the default dumps root (``dumps/``), e.g. a temporary folder for tests


COMPLETE_MARKER = "complete"


INDEX_FILE = "index.json"


def dumps_root(root: str | os.PathLike | None = None) -> Path:
    return Path(root) if root is not None else Path(os.environ.get(DUMPS_ENV, "dumps"))


def _safe(name: str) -> str:
    return re.sub(r'[<>:"/\\|?*\s]', "_", name)


def new_run_dir(root: str | os.PathLike | None, label: str) -> Path:
    """Create ``<root>/<label>-<YYYYmmdd-HHMMSS>-<id>/``; never reuses a folder, even across processes."""
    root = dumps_root(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run = root / f"{_safe(label)}-{stamp}-{uuid.uuid4().hex[:6]}"
        run.mkdir()
    except OSError as e:
        raise UsageError(f"cannot create dump folder under {root}: {e.strerror}") from None
    return run


def write_json(path: Path, data: dict) -> None:
    """Write JSON atomically (a temp file renamed into place)."""
    atomic_file.write_text(path, json.dumps(data, indent=1))


def update_index(run: Path, **sections) -> dict:
    """Add top-level sections (e.g. the golden check's verdict) to a finished run's index, and re-render it."""
    from ..instrument.report import write_html

    index = json.loads((run / INDEX_FILE).read_text())
    index.update(sections)
    write_json(run / INDEX_FILE, index)
    write_html(run, index)
    return index
