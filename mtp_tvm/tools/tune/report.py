"""What a tune run bought, said where it ends: per kernel the tuner's best against the hand schedule it measured,
and ``main`` end to end built with the hand schedules and with the tuned records (a tuned build that is no
faster end to end is the news, whatever the per-kernel figures say)."""

from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path

from ...compiler.options import BuildSpec
from ...passes.target import runs_here
from ...schedule.files import DEFAULT, TUNED
from ...support.text_table import text_table

END_TO_END_CALLS = 20  # timed calls of main per build (after two warm-up calls), their median reported


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
    """``main`` timed built with each schedule (ms, the median of ``END_TO_END_CALLS`` calls), or why not."""

    ms: dict[str, float]
    why_not: str | None = None

    def line(self) -> str:
        if self.why_not:
            return f"end to end: not measured ({self.why_not})"
        hand, tuned = self.ms[DEFAULT], self.ms[TUNED]
        return (f"end to end (main, median of {END_TO_END_CALLS} calls): hand schedules {hand:.4g} ms, tuned "
                f"{tuned:.4g} ms: {hand / tuned:.2f}x" + ("" if tuned < hand else " (the tuned build is no faster)"))


def _median_ms(compiled, inputs: dict) -> float:
    for _ in range(2):  # the runtime loaded, the weights packed
        compiled.run(inputs)
    samples = []
    for _ in range(END_TO_END_CALLS):
        t0 = time.perf_counter()
        compiled.run(inputs)
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


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

    ms = {}
    for schedule in (DEFAULT, TUNED):
        if module is not None:
            compiled = compile(module, target=spec.target, schedule=schedule)
            inputs = compiled.module_file.examples
        else:
            compiled = compile(dataclasses.replace(spec, schedule=schedule))
            inputs = compiled.make_inputs()
        ms[schedule] = _median_ms(compiled, inputs)
    return EndToEnd(ms)
