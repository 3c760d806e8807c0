"""Where a command's wall time goes: ``with phase("inputs"): ...`` around each kind of work, nested phases taking
their time out of the enclosing one, so the parts add up to the wall time. ``time_line()`` is the line ``check``,
``build`` and ``bench`` end with: the import of TVM and torch (and of a pass plugin), the build (its passes and
codegen), the inputs, the first call (the runtime loaded, weights packed) apart from the run, the golden
reference, the profile, the dumps, and what is left."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Iterator

PARTS = ("import", "build", "inputs", "first-call", "run", "golden", "profile", "dumps")
BUILD_PARTS = ("passes", "codegen")  # shown inside build

_totals: dict[str, float] = defaultdict(float)
_stack: list[list] = []  # [name, since] of the open phases, innermost last (main thread only)
_start = {"at": time.perf_counter(), "startup": 0.0}  # the command's start (``start``)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Count the time inside to ``name`` (less its nested phases). Other threads are not counted: their work
    overlaps the main thread's, whose phases already cover the wall time."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    now = time.perf_counter()
    if _stack:
        _totals[_stack[-1][0]] += now - _stack[-1][1]
    frame = [name, now]
    _stack.append(frame)
    try:
        yield
    finally:
        now = time.perf_counter()
        _totals[name] += now - frame[1]
        _stack.remove(frame)
        if _stack:
            _stack[-1][1] = now


def transfer(seconds: float, to: str) -> None:
    """Move ``seconds`` of the innermost open phase to ``to`` (time measured inside it by other means, e.g. a
    pass instrument's time in passes)."""
    if _stack and threading.current_thread() is threading.main_thread():
        _totals[_stack[-1][0]] -= seconds
        _totals[to] += seconds


def start(process_startup: float = 0.0) -> None:
    """A command starts now; ``process_startup``: seconds the process ran before (the interpreter and our
    imports), counted as import."""
    _totals.clear()
    _totals["import"] = process_startup
    _start.update(at=time.perf_counter(), startup=process_startup)


def split() -> tuple[float, dict[str, float]]:
    """(wall seconds, seconds per part): ``build`` its own and its ``BUILD_PARTS``'; ``other`` what no phase
    covers."""
    wall = time.perf_counter() - _start["at"] + _start["startup"]
    parts = {p: _totals.get(p, 0.0) for p in PARTS}
    parts["build"] += sum(_totals.get(p, 0.0) for p in BUILD_PARTS)
    parts["other"] = wall - sum(parts.values())
    return wall, parts


def time_line() -> str:
    """``time: 12.2 s = import 3.1 + build 6.0 (passes 2.0, codegen 3.5) + inputs 0.4 + ...``."""
    wall, parts = split()
    inner = ", ".join(f"{p} {_totals.get(p, 0.0):.1f}" for p in BUILD_PARTS)
    measured = any(_totals.get(p) for p in BUILD_PARTS)  # not where the build ran in another process (bench)
    shown = [f"{p} {s:.1f}" + (f" ({inner})" if p == "build" and measured else "") for p, s in parts.items()]
    return f"time: {wall:.1f} s = " + " + ".join(shown)
