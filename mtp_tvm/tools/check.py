"""``check``: the main job. Build a case, run it on seeded inputs, golden-check every stage output against
torch, and leave a reproducer when it fails."""

from __future__ import annotations

import contextlib
import os

from ..compiler.driver import compile_open, finish_run
from ..compiler.options import BuildSpec, DebugOptions, split_options
from ..compiler.runtime import threads_wanted
from ..instrument.run_folder import retention, update_index
from ..passes.target import require_runs_here, resolve_target, target_json
from ..support.errors import MtpError, UsageError
from ..support.timing import phase
from ..verify.golden_check import (
    LM_HEAD_LOGITS,
    GoldenOptions,
    Provenance,
    golden_check,
    logit_perturbation,
    seeded_golden,
    validate_check_args,
)
from ..verify.results import CheckResult
from .kernel_calls import nan_origin, record
from .kernel_repro import KERNEL_REPRO_DIR
from .localize import localize_failure
from .profile import ProfileOptions, profile_options, write_to_run_folder
from .profile import profile as profile_main
from .repro import write_repro


def check(spec: BuildSpec | None = None, debug: DebugOptions | None = None, *, seed: int = 0,
          report: str | os.PathLike | None = None, tolerance: dict | None = None, logits_tol: dict | None = None,
          perturb_logit: tuple | None = None, profile: bool | ProfileOptions = False, nan_check: bool = False,
          log=print,
          **options) -> CheckResult:
    """Build ``spec`` (keywords: the fields of ``BuildSpec`` and ``DebugOptions``, as for ``compile``), run it on
    inputs drawn from ``seed``, and compare each stage with its torch golden.

    For the LM-head cases: ``logits_tol`` overrides ``DEFAULT_LOGITS_TOLERANCE`` (atol, rtol, max_error_ratio,
    max_e2e_abs_diff), ``perturb_logit=(owner, row, col[, delta])`` adds delta (default 1.0) to one device logit
    before the comparison. When the check fails (and no perturbation caused it), a reproducer is written to
    ``repro/`` in the run folder (a new one under ``dumps/`` when not dumping). ``profile`` (True or
    ``ProfileOptions``): time every kernel of ``main`` afterwards (``tools/profile.py``) into ``result.profile``,
    and ``profile.json`` into the run folder when dumping. ``nan_check``: name the first kernel call whose
    output holds NaN/Inf (``result.nan_origin``). A failing check that dumps also compares every kernel call
    with a ``schedule=none`` build and writes ``kernel_repro/`` beside ``repro/`` (``tools/localize.py``).
    """
    spec, debug = split_options(spec, debug, options, "check")
    validate_check_args(seed, tolerance, report, log, logits_tol)
    if perturb_logit is not None and not isinstance(perturb_logit, (tuple, list)):
        raise UsageError(f"perturb_logit must be (owner, row, col[, delta]), got {perturb_logit!r}")
    threads_wanted()  # a bad TVM_NUM_THREADS fails before the build, not after it
    profiling = profile_options(profile)
    require_runs_here(resolve_target(spec.target))
    log(f"[BUILD] case={spec.case} preset={spec.preset} frontend={spec.frontend} schedule={spec.schedule}")
    compiled = compile_open(spec, debug)
    with checking(compiled):
        result = _check_built(compiled, debug, seed, tolerance, logits_tol, perturb_logit, profiling, nan_check,
                              log)
    return close_check(compiled, result, report, log)


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


def _check_built(compiled, debug: DebugOptions, seed: int, tolerance, logits_tol, perturb_logit, profiling,
                 nan_check: bool, log) -> CheckResult:
    """The golden check of a fresh build, its profile and reproducer, and its verdict in the run's index."""
    c, s, spec = compiled.case, compiled.shapes, compiled.spec
    if compiled.unscheduled:
        log(f"[schedule] no {spec.schedule!r} schedule covers {', '.join(compiled.unscheduled)}: lowered as written")
    for kernel, why in compiled.untuned.items():
        log(f"[tuned] {kernel}: {why}; its hand schedule is used")
    if (logits_tol is not None or perturb_logit is not None) and LM_HEAD_LOGITS not in c.output_specs(s):
        raise UsageError(f"LM-head logits options apply to cases with the lm_head stage; {c.name!r} has none")
    perturbation = None if perturb_logit is None else logit_perturbation(
        tuple(perturb_logit), c.output_specs(s)[LM_HEAD_LOGITS].shape)
    options = GoldenOptions(seed, tolerance, logits_tol, perturbation)
    golden = seeded_golden(c, s, seed)
    built = Provenance(target_json(compiled.target), compiled.frontend, compiled.schedule, compiled.build_seconds,
                       compiled.dump_dir)
    result = golden_check(compiled.run, c, s, built, options, golden=golden, log=log)
    result.gate, result.pass_records = compiled.gate, compiled.pass_records
    if profiling is not None:
        log(f"[PROFILE] {profiling.rounds} rounds")
        result.profile = profile_main(compiled, golden[0], profiling)
        if compiled.dump_dir is not None:
            write_to_run_folder(result.profile, compiled.dump_dir)
    if nan_check:
        result.nan_checked, result.nan_origin = True, nan_origin(record(compiled, golden[0]))
    with phase("dumps"):
        _write_outcome(compiled, result, golden, options, debug.dump_root, tolerance, log)
    return result


def _write_outcome(compiled, result, golden, options, dump_root, tolerance, log) -> None:
    """A failing check's reproducers (``repro/``; with dumps ``kernel_repro/`` too), the verdict in the run's
    index."""
    if not result.passed and options.perturbation is None:
        try:
            result.repro_dir = str(write_repro(compiled, *golden, options, result, dump_root))
        except (UsageError, OSError) as e:  # the failure is the news: report it (exit 1), and why no reproducer
            result.repro_error = str(e) if isinstance(e, UsageError) else f"{e.strerror}: {e.filename}"
        if compiled.dump_dir is not None:
            log("[LOCALIZE] every kernel call against schedule=none")
            try:
                result.kernel_repro_dir = localize_failure(compiled, options.seed, tolerance).kernel_repro_dir
            except (MtpError, OSError) as e:
                log(f"[LOCALIZE] no kernel reproducer: {e}")
    if compiled.dump_dir is not None:
        repro = os.path.relpath(result.repro_dir, compiled.dump_dir) if result.repro_dir else None
        kernel = {"kernel_repro": KERNEL_REPRO_DIR} if result.kernel_repro_dir else {}
        update_index(compiled.dump_dir, check={"passed": result.passed, "seed": options.seed,
                                               "failed_outputs": result.failed_outputs, "repro": repro, **kernel})
