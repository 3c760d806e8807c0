"""What a tune run bought, said where it ends: per kernel the tuner's best against the hand schedule it measured,
and ``main`` end to end built with the hand schedules and with the tuned records (a tuned build that is no
faster end to end is the news, whatever the per-kernel figures say; no gain is claimed within the noise of the
calls, and a load that competed for the cores is said)."""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from ...compiler.options import BuildSpec
from ...passes.target import runs_here
from ...schedule.files import DEFAULT, TUNED
from ...support.load_average import LoadWatch
from ...support.text_table import text_table

END_TO_END_CALLS = 21  # timed calls of main per build, alternating between the builds; their medians reported
WARM_SECONDS = 1.0  # each build called this long first (the first calls after a load run 10-40 % slower)
NOISE_FLOOR = 0.02  # no gain under 2 % is claimed, whatever the spread of the calls


def kernel_table(result) -> str:
    """Per kernel (``result``: a ``tune.TuneResult``): the hand schedule's ms, the tuner's best, their ratio,
    and the candidates measured per space."""
    rows = [("kernel", "hand ms", "tuned best ms", "hand / tuned", "measured")]
    for name in sorted(set(result.best_ms) | set(result.default_ms)):
        hand, best = result.default_ms.get(name), result.best_ms.get(name)
        measured = ", ".join(f"{s} {n}" for s, n in sorted(result.measured.get(name, {}).items())) or "none"
        rows.append((name, "-" if hand is None else f"{hand:.4g}", "-" if best is None else f"{best:.4g}",
                     f"{hand / best:.2f}x" if hand and best else "-", measured))
    return "\n".join(text_table(rows, align_right=frozenset({1, 2, 3})))


@dataclasses.dataclass(frozen=True)
class EndToEnd:
    """``main`` timed built with each schedule (ms, the median of ``END_TO_END_CALLS`` calls), the calls'
    relative spread (the larger interquartile range over median of the two), the load warning of those calls,
    or why not measured."""

    ms: dict[str, float]
    why_not: str | None = None
    spread: float = 0.0
    load_warning: str | None = None

    @property
    def noise(self) -> float:
        """The change a ratio must exceed to be called a gain or a loss."""
        return max(NOISE_FLOOR, self.spread)

    def line(self) -> str:
        if self.why_not:
            return f"end to end: not measured ({self.why_not})"
        hand, tuned = self.ms[DEFAULT], self.ms[TUNED]
        ratio = hand / tuned
        verdict = (f"no gain beyond the noise (+-{100 * self.noise:.0f} %)" if abs(ratio - 1) <= self.noise
                   else f"{ratio:.2f}x" if ratio > 1 else f"{ratio:.2f}x: the tuned build is slower")
        return (f"end to end (main, medians of {END_TO_END_CALLS} alternating calls): hand schedules {hand:.4g} ms, "
                f"tuned {tuned:.4g} ms: {verdict}" + (f"\nwarning: {self.load_warning}" if self.load_warning else ""))


def _relative_spread(samples: list[float]) -> float:
    q1, _, q3 = statistics.quantiles(samples, n=4)
    return (q3 - q1) / statistics.median(samples)


def timed_alternately(runs: dict[str, Callable[[], object]]) -> tuple[dict[str, list[float]], dict]:
    """Each run warmed ``WARM_SECONDS``, then ``END_TO_END_CALLS`` rounds calling each once in turn (ms), and the
    load around the rounds (``support.load_average``)."""
    for run in runs.values():
        start = time.perf_counter()
        while time.perf_counter() - start < WARM_SECONDS:
            run()
    samples = {name: [] for name in runs}
    load = LoadWatch.start()
    for _ in range(END_TO_END_CALLS):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            samples[name].append((time.perf_counter() - t0) * 1e3)
    return samples, load.report()


def end_to_end(spec: BuildSpec, module: str | None = None, remote: bool = False,
               elsewhere: Path | None = None) -> EndToEnd:
    """``spec``'s case (or the ``module`` file) built with the default and the tuned schedule and timed here.
    ``elsewhere``: the records went to this folder, which ``--schedule tuned`` builds do not read."""
    if remote:
        return EndToEnd({}, "tuned over RPC: bench --schedule tuned --rpc-tracker times it there")
    if elsewhere is not None:
        return EndToEnd({}, f"the records are in {elsewhere}, which a tuned build does not read (it reads <tuned "
                            "root>/<target>/<case>, the root $MTP_TVM_TUNED_ROOT or schedules/tuned/): not timed")
    if not runs_here(spec.resolved_target):
        return EndToEnd({}, f"a {spec.target} build does not run here")
    from ...compiler.driver import compile

    runs = {}
    for schedule in (DEFAULT, TUNED):
        if module is not None:
            compiled = compile(module, target=spec.target, schedule=schedule)
            inputs = compiled.module_file.examples
        else:
            compiled = compile(dataclasses.replace(spec, schedule=schedule))
            inputs = compiled.make_inputs()
        runs[schedule] = functools.partial(compiled.run, inputs)
    samples, load = timed_alternately(runs)
    return EndToEnd({name: statistics.median(ms) for name, ms in samples.items()},
                    spread=max(_relative_spread(ms) for ms in samples.values()), load_warning=load["warning"])
