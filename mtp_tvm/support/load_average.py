"""The machine's load around a timed run: the 1-minute load average (``os.getloadavg``) before the rounds,
after each and after them all. Other work that moves it, or that asks for more than the cores before or during
the rounds, makes every ratio of the run unreliable: torch eager took 12-15 ms on a tiny GEMM while other
work ran, and the bench printed 378x. ``LoadWatch.report`` says so, and benches mark their ratios."""

from __future__ import annotations

import dataclasses
import os

LOAD_CHANGE = 1.0  # the 1-minute load average moved by more than this (and by more than half): say so


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which containers and ``taskset`` narrow)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclasses.dataclass
class LoadWatch:
    """Load average samples of one timed run: ``start()`` before the rounds, ``sample()`` after each round,
    ``report()`` at the end (it takes the last sample)."""

    before: float
    during: list[float] = dataclasses.field(default_factory=list)

    @classmethod
    def start(cls) -> LoadWatch:
        return cls(os.getloadavg()[0])

    def sample(self) -> None:
        self.during.append(os.getloadavg()[0])

    def report(self, cpus: int | None = None) -> dict:
        """``before``, ``after``, ``peak`` (the highest sample), ``cores``, ``unreliable`` (the load exceeded the
        cores before or during the rounds) and ``warning`` (None, or why the figures need care)."""
        self.sample()
        cpus = cpus or usable_cores()
        after, peak = self.during[-1], max(self.during)
        warnings = []
        moved = after - self.before
        if abs(moved) > LOAD_CHANGE and abs(moved) > 0.5 * self.before:
            warnings.append(f"the load average moved from {self.before:.2f} to {after:.2f} during the rounds: "
                            "other work shared the cores, read the figures with care")
        over = [f"{when} {value:.2f}" for when, value in (("before the rounds", self.before),
                                                           ("during them (peak)", peak)) if value > cpus]
        if over:
            warnings.append(f"the load average exceeds the {cpus} cores ({', '.join(over)}): other work competed "
                            "for them, so the ratios are unreliable")
        return {"before": self.before, "after": after, "peak": peak, "cores": cpus, "unreliable": bool(over),
                "warning": "; ".join(warnings) or None}
