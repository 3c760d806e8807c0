"""``check``: the main job. Build a case, run it on seeded inputs, golden-check every stage output against
torch, and leave a reproducer when it fails."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Mapping

from ...compiler.driver import compile_open, finish_run
from ...compiler.options import BuildSpec, DebugOptions, split_options
from ...compiler.runtime import threads_wanted
from ...instrument.run_folder import retention, update_index
from ...passes.target import require_runs_here, resolve_target, target_json
from ...support.errors import MtpError, UsageError
from ...support.timing import phase
from ...verify.golden_check import (
    LM_HEAD_LOGITS,
    GoldenOptions,
    Provenance,
    golden_check,
    logit_perturbation,
    seeded_golden,
    validate_check_args,
)
from ...verify.results import CheckResult, ProfileReport
from ...verify.tolerances import LogitsTolerance, RatioTolerance
from ..measure.profile import ProfileOptions, profile_options, write_to_run_folder
from ..measure.profile import profile as profile_main
from .kernel_calls import nan_origin, record
from .kernel_repro import KERNEL_REPRO_DIR
from .localize import localize_failure
from .repro import write_repro


def check(spec: BuildSpec | None = None, debug: DebugOptions | None = None, *, seed: int = 0,
          report: str | os.PathLike | None = None, tolerance: RatioTolerance | Mapping | None = None,
          logits_tol: LogitsTolerance | Mapping | None = None, perturb_logit: tuple | None = None,
          profile: bool | ProfileOptions = False, nan_check: bool = False, weights: Mapping | None = None, log=print,
          **options) -> CheckResult:
    """Build ``spec`` (keywords: the fields of ``BuildSpec`` and ``DebugOptions``, as for ``compile``), run it on
    inputs drawn from ``seed``, and compare each stage with its torch golden.

    ``tolerance``: every output's ``ratio_allclose`` (a ``RatioTolerance``, or a dict of some of its fields).
    For the LM-head cases: ``logits_tol`` (a ``LogitsTolerance`` or a dict of some of its fields: atol, rtol,
    max_error_ratio, max_e2e_abs_diff), ``perturb_logit=(owner, row, col[, delta])`` adds delta (default 1.0) to
    one device logit before the comparison. When the check fails (and no perturbation caused it), a reproducer
    is written to ``repro/`` in the run folder (a new one under ``dumps/`` when not dumping). ``profile`` (True
    or ``ProfileOptions``): time every kernel of ``main`` afterwards (``tools/measure/profile.py``) into
    ``result.profile``, and ``profile.json`` into the run folder when dumping. ``nan_check``: name the first
    kernel call whose output holds NaN/Inf (``result.nan_origin``). ``weights``: some or all of the case's
    weight inputs by name (``load_weights``) in place of the seeded ones, the golden computed on them. A failing
    check that dumps also compares
    every kernel call with a ``schedule=none`` build and writes ``kernel_repro/`` beside ``repro/``
    (``tools/check/localize.py``).
    """
    spec, debug = split_options(spec, debug, options, "check")
    validate_check_args(seed, report, log)
    golden_options = _golden_options(spec, seed, RatioTolerance.of(tolerance), logits_tol, perturb_logit)
    threads_wanted()  # a bad TVM_NUM_THREADS fails before the build, not after it
    profiling = profile_options(profile)
    require_runs_here(resolve_target(spec.target))
    log(f"[BUILD] case={spec.case} preset={spec.preset} frontend={spec.frontend} schedule={spec.schedule}")
    compiled = compile_open(spec, debug)
    with checking(compiled):
        result = _check_built(compiled, debug, golden_options, profiling, nan_check, log, weights)
    return close_check(compiled, result, report, log)


def _golden_options(spec: BuildSpec, seed: int, tolerance: RatioTolerance, logits_tol, perturb_logit) -> GoldenOptions:
    """How the case's run is judged; the LM-head options refused, before the build, for a case without it."""
    logits = LogitsTolerance.of(logits_tol)
    if perturb_logit is not None and not isinstance(perturb_logit, (tuple, list)):
        raise UsageError(f"perturb_logit must be (owner, row, col[, delta]), got {perturb_logit!r}")
    case, shapes = spec.resolve()
    lm_head = case.output_specs(shapes).get(LM_HEAD_LOGITS)
    if (logits_tol is not None or perturb_logit is not None) and lm_head is None:
        raise UsageError(f"LM-head logits options apply to cases with the lm_head stage; {case.name!r} has none")
    perturbation = None if perturb_logit is None else logit_perturbation(tuple(perturb_logit), lm_head.shape)
    return GoldenOptions(seed, tolerance, logits, perturbation)


@contextlib.contextmanager
def checking(compiled):
    """The check of a build whose run folder is open: one that raises writes no more to its run, which is then
    complete; an interrupted one stays incomplete."""
    try:
        yield
    except KeyboardInterrupt:
        raise
    except BaseException:
        finish_run(compiled)
        raise


def close_check(compiled, result: CheckResult, report: str | os.PathLike | None, log) -> CheckResult:
    """Once the verdict is in the run's index: the run complete (retention, of any process, may remove it from
    now), what the retention did, and the JSON ``report``."""
    finish_run(compiled)
    if compiled.pruned_dumps:
        log(f"[dumps] removed {len(compiled.pruned_dumps)} old run(s) beyond the newest {retention()} "
            f"(MTP_TVM_DUMPS_KEEP; `mtp-tvm dumps keep RUN` keeps one for good)")
    if compiled.prune_error:
        log(f"[dumps] retention: {compiled.prune_error}")
    if report is not None:
        with phase("dumps"):
            result.write_report(report)
    return result


def _check_built(compiled, debug: DebugOptions, options: GoldenOptions, profiling: ProfileOptions | None,
                 nan_check: bool, log, weights: Mapping | None = None) -> CheckResult:
    """The golden check of a fresh build with its profile, NaN origin and reproducers, made once; its verdict
    in the run's index."""
    c, s = compiled.case, compiled.shapes
    log_schedule_gaps(compiled, log)
    golden = seeded_golden(c, s, options.seed, weights)
    built = Provenance(target_json(compiled.target), compiled.frontend, compiled.schedule, compiled.build_seconds,
                       compiled.dump_dir)
    verdict = golden_check(compiled.run, c, s, built, options, golden=golden, log=log)
    nan = {"nan_checked": True, "nan_origin": nan_origin(record(compiled, golden[0]))} if nan_check else {}
    result = dataclasses.replace(
        verdict, gate=compiled.gate, pass_records=compiled.pass_records,
        profile=None if profiling is None else profile_into_run(compiled, golden[0], profiling, log), **nan)
    with phase("dumps"):
        if not result.passed and options.perturbation is None:
            result = dataclasses.replace(result, **_reproducers(compiled, result, golden, options, debug.dump_root,
                                                                log))
        if compiled.dump_dir is not None:
            repro = os.path.relpath(result.repro_dir, compiled.dump_dir) if result.repro_dir else None
            kernel = {"kernel_repro": KERNEL_REPRO_DIR} if result.kernel_repro_dir else {}
            update_index(compiled.dump_dir, check={"passed": result.passed, "seed": options.seed,
                                                   "failed_outputs": result.failed_outputs, "repro": repro, **kernel})
    return result


def log_schedule_gaps(compiled, log) -> None:
    """The kernels the asked schedule did not cover and the user passes that changed nothing, said before the run
    (cases and module files alike)."""
    if compiled.unscheduled:
        log(f"[schedule] no {compiled.schedule!r} schedule covers {', '.join(compiled.unscheduled)}: "
            "lowered as written")
    for kernel, why in compiled.untuned.items():
        log(f"[tuned] {kernel}: {why}; its hand schedule is used")
    for why in compiled.idle_passes:
        log(f"[passes] warning: {why}")


def profile_into_run(compiled, inputs: dict, profiling: ProfileOptions, log) -> ProfileReport:
    """``--profile``: every kernel of ``main`` timed on ``inputs``; ``profile.json`` into the run folder when
    dumping."""
    log(f"[PROFILE] {profiling.rounds} rounds")
    with phase("profile"):
        found = profile_main(compiled, inputs, profiling)
    if compiled.dump_dir is not None:
        write_to_run_folder(found, compiled.dump_dir)
    return found


def _reproducers(compiled, result: CheckResult, golden, options: GoldenOptions, dump_root, log) -> dict:
    """A failing check's reproducers as ``CheckResult`` fields: ``repro/`` (or why none), and with dumps
    ``kernel_repro/`` (the first kernel call that differs from a ``schedule=none`` build)."""
    found = {}
    try:
        found["repro_dir"] = str(write_repro(compiled, *golden, options, result, dump_root))
    except (UsageError, OSError) as e:  # the failure is the news: report it (exit 1), and why no reproducer
        found["repro_error"] = str(e) if isinstance(e, UsageError) else f"{e.strerror}: {e.filename}"
    if compiled.dump_dir is not None:
        log("[LOCALIZE] every kernel call against schedule=none")
        try:
            found["kernel_repro_dir"] = localize_failure(compiled, options.seed, options.tolerance).kernel_repro_dir
        except (MtpError, OSError) as e:
            log(f"[LOCALIZE] no kernel reproducer: {e}")
    return found
