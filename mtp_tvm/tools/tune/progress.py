"""``tune``'s progress: trials done of planned, the best milliseconds per kernel and per design space, and the
time left, said after every measured batch (``measure_callback`` wraps it for MetaSchedule); the time budget
(``--budget``) ends the search from there (``BudgetSpent``)."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable

import tvm_ffi

from ...schedule.space import is_hand
from ...schedule.tune_space import TuneSpace
from ...support.errors import last_line


@dataclasses.dataclass
class KernelProgress:
    trials: int = 0
    best_ms: float = float("inf")
    by_space: dict[str, int] = dataclasses.field(default_factory=dict)  # measured candidates per space
    best_by_space: dict[str, float] = dataclasses.field(default_factory=dict)


def candidate_space(sch) -> TuneSpace:
    """Which design space a measured candidate came from (our hand spaces mark their traces: ``is_hand``)."""
    return TuneSpace.HAND if is_hand(sch) else TuneSpace.GENERIC


class BudgetSpent(Exception):  # noqa: N818 (a stop, not an error)
    """The search ran out of its ``--budget`` seconds: raised from the measure callback, through MetaSchedule's
    C++ loop (registered with tvm-ffi, so it comes back as itself)."""


tvm_ffi.error.register_error("BudgetSpent", BudgetSpent)


class ProgressCallback:
    """A ``PyMeasureCallback`` body: after every measured batch, trials done of planned, best latency of the
    kernel overall and per space, and the time left at the rate so far (within the ``budget``, seconds)."""

    def __init__(self, total: int, log: Callable[[str], None], budget: float | None = None):
        self.total, self.log, self.budget = total, log, budget
        self.kernels: dict[str, KernelProgress] = {}
        self.start = time.perf_counter()

    @property
    def done(self) -> int:
        return sum(k.trials for k in self.kernels.values())

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        if not runner_results:  # a task whose space is exhausted still gets scheduled: nothing new to say
            return
        name = task_scheduler.tasks_[task_id].ctx.task_name
        for cand, res in zip(measure_candidates, runner_results):
            ok = res.run_secs and not res.error_msg
            self.add(name, candidate_space(cand.sch), 1e3 * sum(map(float, res.run_secs)) / len(res.run_secs)
                     if ok else None)
        self.say(name)
        self.say_unbuilt(name, builder_results or [])
        if self.spent():
            raise BudgetSpent()

    def say_unbuilt(self, name: str, builder_results: list) -> None:
        """Candidates of the batch that did not build, with the most frequent cause (a build process that hung and
        was killed is said here, not left to MetaSchedule's own log)."""
        causes = Counter(last_line(b.error_msg) for b in builder_results if b.error_msg)
        if causes:
            cause, _ = causes.most_common(1)[0]
            self.log(f"[tune] {name}: {causes.total()} of {len(builder_results)} candidates of the batch did not "
                     f"build ({cause})")

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def spent(self) -> bool:
        return self.budget is not None and self.elapsed() >= self.budget

    def add(self, name: str, space: str, ms: float | None) -> None:
        """One trial of kernel ``name`` from ``space``: its milliseconds, or None when it failed."""
        prog = self.kernels.setdefault(name, KernelProgress())
        prog.trials += 1
        prog.by_space[space] = prog.by_space.get(space, 0) + 1
        if ms is not None:
            prog.best_ms = min(prog.best_ms, ms)
            prog.best_by_space[space] = min(prog.best_by_space.get(space, float("inf")), ms)

    def say(self, name: str) -> None:
        prog = self.kernels[name]
        elapsed = self.elapsed()
        left = elapsed / self.done * max(self.total - self.done, 0)
        if self.budget is not None:
            left = min(left, max(self.budget - elapsed, 0))
        spaces = ", ".join(f"{s} {n} (best {prog.best_by_space.get(s, float('inf')):.4g} ms)"
                           for s, n in sorted(prog.by_space.items()))
        self.log(f"[tune] {self.done}/{self.total} trials, {elapsed:.0f}s, ~{left:.0f}s left | {name}: "
                 f"{prog.trials} trials, best {prog.best_ms:.4g} ms; {spaces}")


def measure_callback(progress: ProgressCallback):
    """``progress`` as the ``PyMeasureCallback`` MetaSchedule calls after every measured batch."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class _Progress(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            progress.apply(task_scheduler, task_id, measure_candidates, builder_results, runner_results)

    return _Progress()
