"""One function followed through a run: every pass that changed it, added or removed it, with its part of
that pass's diff, so a kernel's lowering reads without the rest of the module.

Made after the build from what the run folder already holds (``dumps show --func NAME --history`` and
``index.html``): for each pass that changed the module, its input and output files are split into functions
(``ir_text.split_functions``) and each function whose text differs is diffed on its own; an added function is
shown whole, a removed one by its first lines. Hunk line numbers are those of the dump files. A pass run inside
another (FuseTIR's helpers) is listed after it; the outer pass's step is left out where the passes it ran
account for all it did to the function. A pass whose output no later pass reads (the device ``Filter`` of a
CPU build, which drops every function) is marked ``(side module)``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..instrument.ir_text import split_functions, unified_diff
from ..instrument.run_states import state_files
from ..support import plain_files
from ..support.errors import UsageError, did_you_mean
from ..support.text_table import text_table


@dataclasses.dataclass(frozen=True)
class HistoryStep:
    """What pass ``index`` did to the function: ``changed``, ``added`` or ``removed``, and its hunks."""

    index: int
    phase: str
    name: str
    depth: int
    event: str
    diff: tuple[str, ...]
    added: int
    removed: int

    def as_dict(self) -> dict:
        return {"index": self.index, "phase": self.phase, "name": self.name, "depth": self.depth,
                "event": self.event, "added": self.added, "removed": self.removed, "diff": "\n".join(self.diff)}


@dataclasses.dataclass(frozen=True)
class KernelHistory:
    """Function ``func`` of run ``run`` through its passes (``in_input``: the compiler's input had it)."""

    run: Path
    func: str
    in_input: bool
    steps: tuple[HistoryStep, ...]
    passes: int

    def table(self) -> str:
        rows = [("#", "phase", "pass", "event", "+", "-")]
        rows += [(f"{s.index:03d}", s.phase, "  " * s.depth + s.name, s.event, s.added, s.removed)
                 for s in self.steps]
        return "\n".join(text_table(rows, {4, 5}))

    def text(self) -> str:
        head = (f"{self.func} in {self.run}: {'in the input' if self.in_input else 'not in the input'}; "
                f"{len(self.steps)} of {self.passes} passes changed it")
        parts = [head, self.table()]
        for s in self.steps:
            inside = " (run inside another pass)" if s.depth else ""
            parts.append(f"\n=== {s.index:03d} {s.phase}/{s.name}: {s.event} (+{s.added} -{s.removed}){inside} ===")
            parts.append("\n".join(s.diff) if s.diff else "(no text change)")
        return "\n".join(parts) + "\n"


class _Functions:
    """The functions of each state file, read once: consecutive passes share their files."""

    def __init__(self, run: Path):
        self.run = run
        self._cache: dict[str, dict[str, tuple[int, list[str]]]] = {}

    def of(self, name: str) -> dict[str, tuple[int, list[str]]]:
        """Function name -> (its first line in the file, its lines)."""
        if name not in self._cache:
            try:
                lines = plain_files.read_text(self.run / name).splitlines()
            except (OSError, UnicodeDecodeError):
                lines = []
            self._cache[name] = {f.name: (f.start, lines[f.start:f.end]) for f in split_functions(lines)}
        return self._cache[name]


@dataclasses.dataclass
class _Change:
    pos: int  # in index["passes"]
    o_start: int
    o_lines: list[str] | None
    n_start: int
    n_lines: list[str] | None


def _raw_changes(index: dict, funcs: _Functions) -> dict[str, list[_Change]]:
    """For each pass that changed the module, the functions whose text differs between its input and output."""
    before, after = state_files(index)
    out: dict[str, list[_Change]] = {}
    for pos, (p, b, a) in enumerate(zip(index["passes"], before, after)):
        if not p.get("changed") or b is None or a is None or a == b:
            continue
        old, new = funcs.of(b), funcs.of(a)
        for name in [*new, *(f for f in old if f not in new)]:
            (o_start, o_lines), (n_start, n_lines) = old.get(name, (0, None)), new.get(name, (0, None))
            if o_lines != n_lines:
                out.setdefault(name, []).append(_Change(pos, o_start, o_lines, n_start, n_lines))
    return out


def _accounted(passes: list[dict], changes: list[_Change]) -> list[_Change]:
    """Drop a pass's change where the passes it ran account for all of it (their first input and last output
    of the function are its own): FuseTIR's diff repeats its helpers'."""
    kept = []
    for k, c in enumerate(changes):
        depth = passes[c.pos].get("depth", 0)
        end = next((j for j in range(c.pos + 1, len(passes)) if passes[j].get("depth", 0) <= depth), len(passes))
        inner = [d for d in changes[k + 1:] if d.pos < end]
        if not (inner and inner[0].o_lines == c.o_lines and inner[-1].n_lines == c.n_lines):
            kept.append(c)
    return kept


def _step(p: dict, c: _Change, side: bool = False) -> HistoryStep:
    if c.o_lines is None:  # added: shown whole, it is where the function starts
        diff = (f"@@ -{c.o_start},0 +{c.n_start + 1},{len(c.n_lines)} @@", *("+" + ln for ln in c.n_lines))
        event, added, removed = "added", len(c.n_lines), 0
    elif c.n_lines is None:  # removed: its first lines only (the device Filter removes every function)
        head = next((k + 1 for k, ln in enumerate(c.o_lines) if ln.lstrip().startswith("def ")), 1)
        diff = (f"@@ -{c.o_start + 1},{head} +{c.o_start},0 @@", *("-" + ln for ln in c.o_lines[:head]),
                f"... the whole function, {len(c.o_lines)} lines, removed")
        event, added, removed = "removed", 0, len(c.o_lines)
    else:
        diff = tuple(unified_diff(c.o_lines, c.n_lines, "", "", c.o_start, c.n_start)[2:])
        event = "changed"
        added = sum(1 for ln in diff if ln.startswith("+"))
        removed = sum(1 for ln in diff if ln.startswith("-"))
    if side:
        event += " (side module)"
    return HistoryStep(p["index"], p["phase"], p["name"], p.get("depth", 0), event, diff, added, removed)


def _side_branches(run: Path, index: dict) -> set[int]:
    """Positions of changed passes whose output no later pass reads (``run_states``): the device ``Filter`` of
    a CPU build, whose module (no functions) is not what the host passes go on with. A later pass may read the
    same module from another file (a pass run inside another ends with its parent's module): same bytes, same
    module."""
    passes, (before, _) = index["passes"], state_files(index)
    side, later = set(), set()
    for pos in range(len(passes) - 1, -1, -1):
        f = passes[pos].get("file")
        if later and passes[pos].get("changed") and f and f not in later and not _read_later(run, f, later):
            side.add(pos)
        if before[pos]:
            later.add(before[pos])
    return side


def _read_later(run: Path, name: str, later: set[str]) -> bool:
    try:
        size, data = (run / name).stat().st_size, plain_files.read_text(run / name)
        return any((run / g).stat().st_size == size and plain_files.read_text(run / g) == data for g in later)
    except (OSError, UnicodeDecodeError):
        return False


def _steps(run: Path, index: dict, only: str | None = None) -> dict[str, list[HistoryStep]]:
    """Every function's steps in the run (or only function ``only``'s), in pass order."""
    passes = index["passes"]
    changes = _raw_changes(index, _Functions(run))
    side = _side_branches(run, index)
    return {f: [_step(passes[c.pos], c, c.pos in side) for c in _accounted(passes, cs)]
            for f, cs in changes.items() if only is None or f == only}


def histories(run: Path, index: dict) -> dict[str, list[dict]]:
    """Function name -> its steps as plain dicts (what ``index.html`` embeds), functions in the order a pass
    first touched them."""
    steps = _steps(run, index)
    order = sorted(steps, key=lambda f: (steps[f][0].index, f))
    return {f: [s.as_dict() for s in steps[f]] for f in order}


def kernel_history(run: Path, index: dict, func: str) -> KernelHistory:
    """``dumps show RUN --func NAME --history``: ``func`` through the run; an unknown name is a ``UsageError``
    naming close matches."""
    _, after = state_files(index)
    funcs = _Functions(run)
    files = {f for f in [index.get("input"), *after] if f}
    known = set().union(*(funcs.of(f) for f in files)) if files else set()
    if func not in known:
        raise UsageError(f"no function {func!r} in any dumped module of {run}"
                         + did_you_mean(func, known, list_known=True))
    steps = _steps(run, index, func).get(func, [])
    return KernelHistory(run, func, func in funcs.of(index["input"]), tuple(steps), len(index["passes"]))
