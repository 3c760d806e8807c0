"""``check``: the main job. Build a case, run it on seeded inputs, golden-check every stage output against
torch, and leave a reproducer when it fails."""

from __future__ import annotations

import os
from pathlib import Path

from ..compiler.driver import compile
from ..compiler.options import BuildSpec, DebugOptions, split_options
from ..instrument.run_folder import retention, update_index
from ..passes.target import (
    device_for,
    host_triple,
    is_gpu,
    resolve_target,
    runs_here,
    target_json,
    target_triple,
)
from ..spec.cases import validate_seed
from ..support.errors import UsageError
from ..support.timing import phase
from ..verify.comparators import device_hidden_logits_allclose, logits_tolerance
from ..verify.golden_check import (
    LM_HEAD_LOGITS,
    GoldenOptions,
    Provenance,
    _perturbation,
    golden_check,
    seeded_golden,
)
from ..verify.results import CheckResult
from .profile import ProfileOptions, profile_options, write_to_run_folder
from .profile import profile as profile_main
from .repro import write_repro


def _require_runs_here(target) -> None:
    """A check runs what it builds: a target this machine can build but not run (another CPU, C source) is
    refused before the build, pointing to ``build``."""
    if is_gpu(target):
        device_for(target)  # no GPU: its own message
    elif not runs_here(target):
        what = target.kind.name + (f" for {target_triple(target_json(target))}" if target.kind.name == "llvm" else "")
        raise UsageError(f"target {what} builds here but cannot run on this machine "
                         f"({host_triple()}); build it with `mtp-tvm build --target ... --out DIR` and run or check "
                         "the artifact where it runs")


def check(spec: BuildSpec | None = None, debug: DebugOptions | None = None, *, seed: int = 0,
          report: str | os.PathLike | None = None, tolerance: dict | None = None, logits_tol: dict | None = None,
          perturb_logit: tuple | None = None, profile: bool | ProfileOptions = False, log=print,
          **options) -> CheckResult:
    """Build ``spec`` (keywords: the fields of ``BuildSpec`` and ``DebugOptions``, as for ``compile``), run it on
    inputs drawn from ``seed``, and compare each stage with its torch golden.

    For the LM-head cases: ``logits_tol`` overrides ``DEFAULT_LOGITS_TOLERANCE`` (atol, rtol, max_error_ratio,
    max_e2e_abs_diff), ``perturb_logit=(owner, row, col[, delta])`` adds delta (default 1.0) to one device logit
    before the comparison. When the check fails (and no perturbation caused it), a reproducer is written to
    ``repro/`` in the run folder (a new one under ``dumps/`` when not dumping). ``profile`` (True or
    ``ProfileOptions``): time every kernel of ``main`` afterwards (``tools/profile.py``) into ``result.profile``,
    and ``profile.json`` into the run folder when dumping.
    """
    spec, debug = split_options(spec, debug, options, "check")
    validate_seed(seed)
    if report is not None and not Path(report).resolve().parent.is_dir():  # fail before the build, not after
        raise UsageError(f"cannot write report {report}: {Path(report).parent} is not a directory")
    profiling = profile_options(profile)
    _require_runs_here(resolve_target(spec.target))
    log(f"[BUILD] case={spec.case} preset={spec.preset} frontend={spec.frontend} schedule={spec.schedule}")
    compiled = compile(spec, debug)
    c, s = compiled.case, compiled.shapes
    if compiled.pruned_dumps:
        log(f"[dumps] removed {len(compiled.pruned_dumps)} old run(s) beyond the newest {retention()} "
            f"(MTP_TVM_DUMPS_KEEP; `mtp-tvm dumps keep RUN` keeps one for good)")
    if compiled.unscheduled:
        log(f"[schedule] no {spec.schedule!r} schedule covers {', '.join(compiled.unscheduled)}: lowered as written")
    for kernel, why in compiled.untuned.items():
        log(f"[tuned] {kernel}: {why}; its hand schedule is used")
    if (logits_tol is not None or perturb_logit is not None) and LM_HEAD_LOGITS not in c.output_specs(s):
        raise UsageError(f"LM-head logits options apply to cases with the lm_head stage; {c.name!r} has none")
    if logits_tol is not None:  # a bad option fails before the run, not after it
        device_hidden_logits_allclose(s.tp, **logits_tolerance(logits_tol))
    perturbation = None if perturb_logit is None else _perturbation(
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
    with phase("dumps"):
        _write_outcome(compiled, result, golden, options, debug.dump_root, report)
    return result


def _write_outcome(compiled, result, golden, options, dump_root, report) -> None:
    """The reproducer of a failing check, the check's verdict in the run folder's index, the JSON report."""
    if not result.passed and options.perturbation is None:
        try:
            result.repro_dir = str(write_repro(compiled, *golden, options, result, dump_root))
        except (UsageError, OSError) as e:  # the failure is the news: report it (exit 1), and why no reproducer
            result.repro_error = str(e) if isinstance(e, UsageError) else f"{e.strerror}: {e.filename}"
    if compiled.dump_dir is not None:
        repro = os.path.relpath(result.repro_dir, compiled.dump_dir) if result.repro_dir else None
        update_index(compiled.dump_dir, check={"passed": result.passed, "seed": options.seed,
                                               "failed_outputs": result.failed_outputs, "repro": repro})
    if report is not None:
        result.write_report(report)
