"""Per-pass IR dumps: one numbered TVMScript file per pass, into a fresh run folder per build.

``PassRecorder`` is a TVM pass instrument. It numbers *leaf* passes in execution order (containers such as
``sequential`` and our phase markers are not passes a user debugs), attributes each to the phase opened by
the last ``mtp.phase.*`` marker, detects unchanged passes by structural hash, times every pass, and writes

    000_input.py                  the module given to the compiler
    NNN_<phase>__<Pass>.py         the module after pass NNN (changed passes; all passes unless only_changed)
    NNN_<phase>__<Pass>.diff       unified diff against the module before that pass (changed passes)
    index.json                    every pass: number, phase, name, changed, +/- lines, ms, file, diff
    complete                      written last: a folder without it is an interrupted run
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import json
import os
import re
import time
import uuid
from pathlib import Path

import tvm
import tvm_ffi

from .errors import UsageError
from .pipeline import PHASE_MARKER_PREFIX

DUMPS_ROOT = Path("dumps")
CONTAINER_PASSES = {"sequential", "_pipeline", "mtp.relax", "mtp.relax_pipeline", "mtp.tir"}
COMPLETE_MARKER = "complete"


def _safe(name: str) -> str:
    return re.sub(r'[<>:"/\\|?*\s]', "_", name)


def new_run_dir(root: str | os.PathLike | None, label: str) -> Path:
    """Create ``<root>/<label>-<YYYYmmdd-HHMMSS>-<id>/``; never reuses a folder, even across processes."""
    root = Path(root) if root is not None else DUMPS_ROOT
    try:
        root.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run = root / f"{_safe(label)}-{stamp}-{uuid.uuid4().hex[:6]}"
        run.mkdir()
    except OSError as e:
        raise UsageError(f"cannot create dump folder under {root}: {e.strerror}") from None
    return run


@dataclasses.dataclass
class PassRecord:
    index: int
    phase: str
    name: str
    changed: bool
    ms: float
    lines_added: int = 0
    lines_removed: int = 0
    file: str | None = None
    diff: str | None = None


@tvm.instrument.pass_instrument
class PassRecorder:
    """Records (and optionally dumps) every leaf pass of a compile."""

    def __init__(self, run_dir: Path | None = None, only_changed: bool = False):
        self.run_dir = run_dir
        self.only_changed = only_changed
        self.records: list[PassRecord] = []
        self.phase = "input"
        self._stack: list[tuple[int, float]] = []
        self._last_hash: int | None = None
        self._last_text = ""

    def write_input(self, mod: tvm.IRModule) -> None:
        self._last_hash, self._last_text = tvm_ffi.structural_hash(mod), mod.script()
        if self.run_dir is not None:
            (self.run_dir / "000_input.py").write_text(self._last_text)

    def run_before_pass(self, mod, info):
        h = tvm_ffi.structural_hash(mod)
        if self._last_hash is not None and h != self._last_hash and not self._is_container(info.name):
            # A new module stream (Relax -> TIR, host/device split): diff against what this pass was given.
            self._last_hash, self._last_text = h, mod.script()
        self._stack.append((h, time.perf_counter()))

    def run_after_pass(self, mod, info):
        before, start = self._stack.pop()
        ms = (time.perf_counter() - start) * 1e3
        name = info.name
        if name.startswith(PHASE_MARKER_PREFIX):
            self.phase = name[len(PHASE_MARKER_PREFIX):]
            return
        if name == "mtp.relax_pipeline":  # tirx.build binds the target before the TIR pipeline's marker
            self.phase = "tir-lower"
        if self._is_container(name):
            return
        after = tvm_ffi.structural_hash(mod)
        rec = PassRecord(len(self.records) + 1, self.phase, name, after != before, ms)
        self.records.append(rec)
        if not rec.changed and self.only_changed:
            return
        stem = f"{rec.index:03d}_{_safe(self.phase)}__{_safe(name)}"
        text = mod.script() if rec.changed else self._last_text
        if rec.changed:
            diff = list(difflib.unified_diff(self._last_text.splitlines(), text.splitlines(),
                                             f"before/{stem}", f"after/{stem}", lineterm=""))
            rec.lines_added = sum(1 for ln in diff if ln.startswith("+") and not ln.startswith("+++"))
            rec.lines_removed = sum(1 for ln in diff if ln.startswith("-") and not ln.startswith("---"))
            if self.run_dir is not None:
                rec.diff = stem + ".diff"
                (self.run_dir / rec.diff).write_text("\n".join(diff) + "\n")
            self._last_text, self._last_hash = text, after
        if self.run_dir is not None:
            rec.file = stem + ".py"
            (self.run_dir / rec.file).write_text(text)

    @staticmethod
    def _is_container(name: str) -> bool:
        return name in CONTAINER_PASSES or not name

    def finish(self, meta: dict) -> None:
        """Write ``index.json`` and then the ``complete`` marker."""
        if self.run_dir is None:
            return
        index = {**meta, "passes": [dataclasses.asdict(r) for r in self.records]}
        tmp = self.run_dir / "index.json.tmp"
        tmp.write_text(json.dumps(index, indent=1))
        tmp.replace(self.run_dir / "index.json")
        (self.run_dir / COMPLETE_MARKER).write_text("")
