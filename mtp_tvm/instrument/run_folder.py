"""Run folders: where a dumping build writes, one new folder per build under ``dumps/`` (or ``$MTP_TVM_DUMPS``),
named ``<case>-<target>-<YYYYmmdd-HHMMSS>-<id>`` so concurrent processes never share one; ``index.json`` is its
table of contents and ``complete`` is written last, once its process will not write to it again (a check after
its verdict: ``compiler.compiled.finish_run``). Folders do not grow without bound: a dumping build keeps the
newest ``retention()`` complete runs of its root (default 20), never one still being written or marked kept.

A build's folder is written by ``RunWriter`` from what the pass recorder (``instrument/recorder.py``) kept:

    000_input.py                  the module given to the compiler
    NNN_<phase>__<Pass>.py        the module after pass NNN (every pass, or changed ones with only_changed)
    NNN_<phase>__<Pass>.diff      unified diff of what pass NNN did to its own input (changed passes)
    NNN_<phase>__<Pass>.input.py  the input of the pass that failed, if the build failed
    host.ll, host.s, device_source.cu   the generated code: LLVM IR, assembly, CUDA C (GPU builds)
    schedule_trace.py             the applied schedules, replayable (``mtp_tvm.schedule``)
    index.json, index.html        every pass: number, phase, name, changed, +/- lines, ms, files
    complete                      written last: a folder without it is an interrupted run
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from ..support import atomic_file, plain_files
from ..support.env import env_int, env_path
from ..support.errors import UsageError

DUMPS_ENV = "MTP_TVM_DUMPS"  # the default dumps root (``dumps/``), e.g. a temporary folder for tests


COMPLETE_MARKER = "complete"


INDEX_FILE = "index.json"


INPUT_FILE = "000_input.py"


NO_TEXT_CHANGE = "# the module changed structurally but prints the same (a change TVMScript does not show)\n"


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


def write_index(run: Path, index: dict, history=None) -> None:
    """``index.json`` and the ``index.html`` rendered from it (``history``: the page's kernel history, when the
    caller made it already)."""
    from ..instrument.report import write_html

    write_json(run / INDEX_FILE, index)
    write_html(run, index, history)


def update_index(run: Path, **sections) -> dict:
    """Add top-level sections (e.g. the golden check's verdict) to a finished run's index, and re-render it."""
    index = json.loads(plain_files.read_text(run / INDEX_FILE))
    index.update(sections)
    write_index(run, index)
    return index


class PassStates(Protocol):
    """What a build kept for its run folder (``instrument.recorder.PassRecorder``): its pass records; per pass
    number the states before and after it (``steps``, keys); each state's text; the input's state."""

    records: list
    steps: dict[int, tuple[object, object]]
    input_key: object

    def dumped(self, rec) -> bool: ...

    def text(self, key) -> str: ...


def pass_stem(rec) -> str:
    """A pass's file names without the extension: ``NNN_<phase>__<Pass>``."""
    return f"{rec.index:03d}_{safe_name(rec.phase)}__{safe_name(rec.name)}"


class RunWriter:
    """Writes one build's new run folder (the layout in the module docstring); the ``complete`` marker is the
    caller's, once it is done (``mark_complete``)."""

    def __init__(self, root: str | os.PathLike | None, label: str):
        self.run = new_run_dir(root, label)

    def write_texts(self, files: dict[str, str]) -> None:
        for name, text in files.items():
            (self.run / name).write_text(text)

    def start_assembly(self, pool: ThreadPoolExecutor, codegen: dict[str, str]) -> list[Future]:
        """Each written ``.ll``'s assembly ``.s``, generated on ``pool`` (futures of the written paths)."""
        from ..passes.codegen import write_assembly

        return [pool.submit(write_assembly, self.run / name) for name in codegen if name.endswith(".ll")]

    def write_passes(self, states: PassStates, diff_of: Callable[[object], list[str]]) -> None:
        """The input, then each dumped pass's module (a state already written is hard-linked) and, where it
        changed the IR, its diff (``diff_of(record)``); fills each record's files, +/- lines and ``input_state``
        (the first file holding its input module)."""
        (self.run / INPUT_FILE).write_text(states.text(states.input_key))
        first_file: dict[object, str] = {}  # state -> the first file holding it; later ones are hard links
        for rec in filter(states.dumped, states.records):
            after = states.steps[rec.index][1]
            stem = pass_stem(rec)
            rec.lines_added = rec.lines_removed = 0
            if rec.changed:
                diff = diff_of(rec)
                rec.lines_added = sum(1 for ln in diff if ln.startswith("+") and not ln.startswith("+++"))
                rec.lines_removed = sum(1 for ln in diff if ln.startswith("-") and not ln.startswith("---"))
                rec.diff = stem + ".diff"
                (self.run / rec.diff).write_text("\n".join(diff) + "\n" if diff else NO_TEXT_CHANGE)
            rec.file = stem + ".py"
            if after in first_file:
                try:
                    os.link(self.run / first_file[after], self.run / rec.file)
                    continue
                except OSError:
                    pass
            (self.run / rec.file).write_text(states.text(after))
            first_file.setdefault(after, rec.file)
        first_file[states.input_key] = INPUT_FILE
        for rec in states.records:
            if rec.index in states.steps:
                rec.input_state = first_file.get(states.steps[rec.index][0])

    def write_failed_input(self, rec, text: str) -> None:
        """The input of the pass that failed, ``NNN_<phase>__<Pass>.input.py``."""
        rec.input_file = f"{pass_stem(rec)}.input.py"
        (self.run / rec.input_file).write_text(text)

    def page_history(self, records: list) -> object:
        """``index.html``'s kernel history, made from the pass files just written (while the assembly is still
        being generated), for ``write_index``."""
        from ..instrument.report import history_script

        return history_script(self.run, {"input": INPUT_FILE, "passes": [dataclasses.asdict(r) for r in records]})

    def write_index(self, meta: dict, error: str | None, sections: dict, history=None) -> None:
        """``index.json`` (``meta``, the status, ``sections``) and ``index.html``."""
        write_index(self.run, {**meta, "status": "build failed" if error else "ok", "error": error, **sections},
                    history)


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
