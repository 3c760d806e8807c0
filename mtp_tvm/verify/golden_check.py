"""The golden check of one run: draw the seeded inputs, run the binary, and put every output through its
comparators against the torch golden chain (spec §1.7, §2, §3.3). Shared by fresh builds (``tools/check``),
prebuilt artifacts and bisect probes."""

from __future__ import annotations

import dataclasses
import numbers
import os
import time
from collections.abc import Callable

import numpy as np

from ..compiler.arrays import to_numpy
from ..contract.cases import LM_HEAD_LOGITS, Case, Comparator, Stage, validate_seed
from ..contract.presets import Shapes
from ..support.atomic_file import require_writable
from ..support.errors import UsageError
from ..support.timing import phase
from ..verify.comparators import (
    Comparison,
    check_logits_contract,
    check_sampled_ids,
    device_hidden_logits_allclose,
    ratio_allclose,
)
from ..verify.results import CheckResult, OutputCheck
from ..verify.tolerances import LogitsTolerance, RatioTolerance, Tolerance


def validate_check_args(seed, report, log) -> None:
    """The arguments every golden check takes, checked before the build or the run, not after them (a bad
    ``report`` would otherwise fail only once the whole check had run, losing its result); the tolerances are
    checked when made (``verify.tolerances``)."""
    validate_seed(seed)
    if report is not None:
        if not isinstance(report, (str, os.PathLike)):
            raise UsageError(f"report must be a file path, got {type(report).__name__} {report!r}")
        require_writable(report, "report")
    if not callable(log):
        raise UsageError(f"log must be a function taking one line (e.g. print), got {log!r}")


@dataclasses.dataclass(frozen=True)
class _Run:
    """What an output's comparators read: the case, its sizes, both output sets, the inputs (when given), the
    ``ratio_allclose`` of every output and the LM-head tolerance."""

    case: Case
    shapes: Shapes
    actual: dict
    expected: dict
    inputs: dict | None
    ratio: Callable[..., Comparison]
    logits_tol: LogitsTolerance


def _device_hidden_logits(r: _Run, stage: Stage, name: str) -> Comparison:
    """The conditional comparator, its reference projected from the hidden state the device's stage read; the
    stage's params (weight, row indices) are the comparator's keywords."""
    if r.inputs is None:
        raise UsageError(f"checking the LM-head logits of case {r.case.name!r} needs the case inputs")
    s = r.shapes
    hidden = to_numpy(r.case.stage_input(stage.name, r.inputs, r.actual)).reshape(s.owners, -1, s.hidden)
    cmp = device_hidden_logits_allclose(s.tp, r.logits_tol)
    return cmp(r.actual[name], r.expected[name], hidden=hidden, **{p.name: r.inputs[p.name] for p in stage.params})


# Each comparator ``Output.checks`` may name: ``check(run, stage, output name) -> Comparison``.
OUTPUT_CHECKS: dict[Comparator, Callable[[_Run, Stage, str], Comparison]] = {
    Comparator.RATIO_ALLCLOSE: lambda r, _st, name: r.ratio(r.actual[name], r.expected[name]),
    Comparator.LOGITS_CONTRACT: lambda r, _st, name: check_logits_contract(
        r.actual[name], r.shapes.batch, r.shapes.seq, r.shapes.vocab_shard, r.expected[name]),
    Comparator.DEVICE_HIDDEN_LOGITS: _device_hidden_logits,
    Comparator.SAMPLED_IDS_ARGMAX: lambda r, st, name: check_sampled_ids(r.actual[name],
                                                                         r.actual[st.outputs[0].name]),
}


def compare_outputs(case: Case, s: Shapes, actual: dict, expected: dict,
                    tolerance: RatioTolerance = RatioTolerance(), inputs: dict | None = None,
                    logits_tol: LogitsTolerance = LogitsTolerance()) -> dict[str, OutputCheck]:
    """Every output through the comparators its ``Output.checks`` names (``OUTPUT_CHECKS``), in order:
    ``ratio_allclose`` with ``tolerance``; the LM head's device-hidden comparator with ``logits_tol`` (it needs
    ``inputs``)."""
    run = _Run(case, s, actual, expected, inputs, ratio_allclose(tolerance), logits_tol)
    return {out.name: OutputCheck(out.name, [OUTPUT_CHECKS[check](run, stage, out.name) for check in out.checks])
            for stage in case.chain for out in stage.outputs}


def logit_perturbation(where: tuple, shape: tuple) -> dict:
    """``(owner, row, col[, delta])`` checked against the logits shape -> ``{"index": [...], "delta": d}``."""
    in_range = all(isinstance(i, numbers.Integral) and 0 <= i < n for i, n in zip(where, shape))
    if len(where) not in (3, 4) or not in_range or not isinstance(where[3] if len(where) == 4 else 1.0, numbers.Real):
        raise UsageError(f"perturb_logit must be (owner, row, col[, delta]) inside logits {shape}, got {tuple(where)}")
    return {"index": [int(i) for i in where[:3]], "delta": float(where[3]) if len(where) == 4 else 1.0}


@dataclasses.dataclass(frozen=True)
class GoldenOptions:
    """How a run is judged: the input ``seed``; ``tolerance`` of ``ratio_allclose`` for every output;
    ``logits_tol`` of the LM-head comparator; ``perturbation``, a deliberate error added to one device logit
    (``{"index": [owner, row, col], "delta": d}``, a debugging aid)."""

    seed: int = 0
    tolerance: RatioTolerance = RatioTolerance()
    logits_tol: LogitsTolerance = LogitsTolerance()
    perturbation: dict | None = None

    def __post_init__(self):
        validate_seed(self.seed)
        RatioTolerance.require(self.tolerance, "GoldenOptions.tolerance")
        LogitsTolerance.require(self.logits_tol, "GoldenOptions.logits_tol")

    @classmethod
    def judging(cls, seed: int, tolerance, logits_tol=None, perturbation: dict | None = None) -> GoldenOptions:
        """The options of a verb's ``tolerance`` keyword (``Tolerance``, ``RatioTolerance``, a dict or None) and
        ``logits_tol``: a ``Tolerance`` judges the LM-head logits too, unless ``logits_tol`` says otherwise."""
        shared = tolerance if isinstance(tolerance, Tolerance) else None
        return cls(seed, RatioTolerance.of(tolerance), LogitsTolerance.of(shared if logits_tol is None else logits_tol),
                   perturbation)


@dataclasses.dataclass(frozen=True)
class Provenance:
    """What made the binary that ran, as the result reports it."""

    target: dict
    frontend: str
    schedule: str
    build_seconds: float
    dump_dir: str | None = None


@dataclasses.dataclass(frozen=True)
class TimedRun:
    """A run's outputs, its first call (the runtime loaded: a CPU build's JIT, the weights validated and packed)
    and a second call's seconds (what a loop pays per call)."""

    outputs: dict
    first_call_seconds: float
    seconds: float


def timed_run(run, inputs: dict) -> TimedRun:
    """``run(inputs)`` twice: first-call work is not run time (a 0.45 ms model read ``run=2220.8ms``)."""
    t0 = time.perf_counter()
    with phase("first-call"):
        outputs = run(inputs)
    t1 = time.perf_counter()
    with phase("run"):
        run(inputs)
    return TimedRun(outputs, t1 - t0, time.perf_counter() - t1)


def _read_only(a: np.ndarray) -> np.ndarray:
    """An array of the check's own, made read-only as the runtime makes a packed weight: nobody writes the drawn
    inputs, and the runtime has nothing to tell the user about arrays the user never gave."""
    chain = [a]
    while isinstance(chain[-1].base, np.ndarray):  # and the arrays it is a view of (of a drawn torch tensor)
        chain.append(chain[-1].base)
    for x in reversed(chain):
        x.flags.writeable = False
    return a


def golden_check(run, c: Case, s: Shapes, built: Provenance, options: GoldenOptions = GoldenOptions(), *,
                 golden: tuple[dict, dict] | None = None, log=print) -> CheckResult:
    """Run ``run`` (named inputs -> named outputs) on inputs drawn from ``options.seed`` and compare every stage
    output with its torch golden; shared by fresh builds, prebuilt artifacts and bisect probes. ``golden``: the
    seeded inputs and expected outputs, already computed (``seeded_golden``)."""
    log(f"[RUN] seed={options.seed}")
    inputs, expected = golden or seeded_golden(c, s, options.seed)
    timed = timed_run(run, {k: _read_only(to_numpy(v)) for k, v in inputs.items()})
    actual = timed.outputs
    perturbation = options.perturbation
    if perturbation is not None:  # a debugging aid: one deliberately wrong device logit
        actual[LM_HEAD_LOGITS] = actual[LM_HEAD_LOGITS].copy()
        actual[LM_HEAD_LOGITS][tuple(perturbation["index"])] += perturbation["delta"]
        log(f"[PERTURB] logits{tuple(perturbation['index'])} += {perturbation['delta']}")
    with phase("golden"):
        outputs = compare_outputs(c, s, actual, expected, options.tolerance, inputs, options.logits_tol)
    return CheckResult(c.name, built.target, s.preset.name, built.frontend, options.seed, s.as_dict(), outputs,
                       built.build_seconds, timed.seconds, str(built.dump_dir) if built.dump_dir else None,
                       perturbation, built.schedule, first_call_seconds=timed.first_call_seconds)


def seeded_golden(case: Case, s: Shapes, seed: int, weights: dict | None = None) -> tuple[dict, dict]:
    """The inputs drawn from ``seed`` (``weights``, by name, in place of the drawn ones) and every stage's torch
    golden."""
    inputs = case.make_inputs(s, seed)
    unknown = sorted(set(weights or ()) - set(inputs))
    if unknown:
        raise UsageError(f"weights {unknown} are not inputs of case {case.name!r}")
    inputs.update(weights or {})
    return inputs, case.golden(inputs, s)
