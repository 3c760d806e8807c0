"""TODO docstring for tools/check"""

from __future__ import annotations

import os
from pathlib import Path

from ..compiler.driver import compile
from ..instrument.run_folder import update_index
from ..passes.target import target_json
from ..support.errors import UsageError
from ..verify.comparators import device_hidden_logits_allclose, logits_tolerance
from ..verify.golden_check import (
    LM_HEAD_LOGITS,
    _perturbation,
    golden_check,
    seeded_golden,
    validate_seed,
)
from ..verify.results import CheckResult


def check(case: str = "tail", target="llvm", preset: str = "flash", frontend: str = "tir",
          tokens: int | None = None, vocab_shard: int | None = None, seed: int = 0,
          dump_passes: bool | str | os.PathLike | None = None, report: str | os.PathLike | None = None,
          tolerance: dict | None = None, log=print, owners: int | None = None, tp: int | None = None,
          logits_tol: dict | None = None, perturb_logit: tuple | None = None, schedule: str = "default",
          **compile_options) -> CheckResult:
    """Build ``case`` with the named schedule, run it on inputs drawn from ``seed``, and compare each stage with
    its torch golden.

    For the LM-head cases: ``owners``/``tp`` size it, ``logits_tol`` overrides ``DEFAULT_LOGITS_TOLERANCE``
    (atol, rtol, max_error_ratio, max_e2e_abs_diff), ``perturb_logit=(owner, row, col[, delta])`` adds delta
    (default 1.0) to one device logit before the comparison.

    ``compile_options`` are ``compile()``'s debugging keywords (``only_changed``, ``dump_filter``,
    ``dump_func``, ``time_passes``, ``disable_passes``, ``bisect_limit``, ``extra_passes``). When the check
    fails (and no perturbation caused it), a reproducer is written to ``repro/`` in the run folder (a new one
    under ``dumps/`` when not dumping).
    """
    from ..tools.repro import write_repro

    seed = validate_seed(seed)
    if report is not None and not Path(report).resolve().parent.is_dir():  # fail before the build, not after
        raise UsageError(f"cannot write report {report}: {Path(report).parent} is not a directory")
    log(f"[BUILD] case={case} preset={preset} frontend={frontend} schedule={schedule}")
    compiled = compile(case=case, target=target, preset=preset, frontend=frontend, tokens=tokens,
                       vocab_shard=vocab_shard, dump_passes=dump_passes, owners=owners, tp=tp, schedule=schedule,
                       **compile_options)
    c, s = compiled.case, compiled.shapes
    if compiled.untuned:
        log(f"[tuned] no MetaSchedule record for {', '.join(compiled.untuned)}: their hand schedule is used")
    if (logits_tol is not None or perturb_logit is not None) and LM_HEAD_LOGITS not in c.output_specs(s):
        raise UsageError(f"LM-head logits options apply to cases with the lm_head stage; {c.name!r} has none")
    if logits_tol is not None:  # a bad option fails before the run, not after it
        device_hidden_logits_allclose(s.tp, **logits_tolerance(logits_tol))
    perturbation = None if perturb_logit is None else _perturbation(
        tuple(perturb_logit), c.output_specs(s)[LM_HEAD_LOGITS].shape)
    golden = seeded_golden(c, s, seed)
    result = golden_check(compiled.run, c, s, target_json(compiled.target), frontend, seed, compiled.build_seconds,
                          compiled.dump_dir, tolerance, log, logits_tol, perturbation, compiled.schedule, golden)
    result.gate, result.pass_records = compiled.gate, compiled.pass_records
    if not result.passed and perturbation is None:
        root = None if dump_passes in (None, False, True) else dump_passes
        result.repro_dir = str(write_repro(compiled, *golden, seed, tolerance, logits_tol, result, root))
    if compiled.dump_dir is not None:
        repro = os.path.relpath(result.repro_dir, compiled.dump_dir) if result.repro_dir else None
        update_index(compiled.dump_dir, check={"passed": result.passed, "seed": seed,
                                               "failed_outputs": result.failed_outputs, "repro": repro})
    if report is not None:
        result.write_report(report)
    return result
