"""``check --module FILE.py``: build the user's own module file, run it on its example inputs and compare with
its reference (``verify.module_golden``), the verdict in the run folder's index as a case's. Every debugging
option of a case's build applies (they are ``DebugOptions``); ``--profile`` times its kernels."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ...compiler.options import DebugOptions
from ...compiler.runtime import threads_wanted
from ...compiler.user_build import ModuleSpec, compile_module_open, split_module_options
from ...instrument.run_folder import update_index
from ...passes.target import require_runs_here, resolve_target
from ...support.timing import phase
from ...verify.golden_check import validate_check_args
from ...verify.module_golden import golden_check_module
from ...verify.results import CheckResult
from ...verify.tolerances import ModuleTolerance
from ..measure.profile import ProfileOptions, profile_options
from .check import checking, close_check, log_schedule_gaps, profile_into_run


def check_module(module=None, debug: DebugOptions | None = None, *, spec: ModuleSpec | None = None,
                 tolerance: ModuleTolerance | Mapping | None = None, report=None,
                 profile: bool | ProfileOptions = False, log=print, **options) -> CheckResult:
    """Build the module file ``module`` (keywords: ``target``, ``schedule`` and the fields of ``DebugOptions``),
    run it on ``example_inputs()`` and compare every output with the reference (torch eagerly, or the module
    built for the CPU with no schedule and no optional pass), as ``torch.testing.assert_close`` with its default
    tolerances per dtype unless ``tolerance`` (a ``ModuleTolerance`` or a dict with ``atol``/``rtol``) sets
    them."""
    spec, debug = split_module_options(module, spec, debug, options, "check_module")
    tolerance = ModuleTolerance.of(tolerance)
    validate_check_args(0, report, log)
    threads_wanted()
    profiling = profile_options(profile)
    require_runs_here(resolve_target(spec.target))
    log(f"[BUILD] module={spec.module} schedule={spec.schedule}")
    compiled = compile_module_open(spec=spec, debug=debug)
    with checking(compiled):
        log_schedule_gaps(compiled, log)
        verdict = golden_check_module(compiled, tolerance, log)
        result = dataclasses.replace(
            verdict, gate=compiled.gate, pass_records=compiled.pass_records,
            profile=None if profiling is None else profile_into_run(compiled, compiled.user.examples, profiling, log))
        if compiled.dump_dir is not None:
            with phase("dumps"):
                update_index(compiled.dump_dir, check={"passed": result.passed, "seed": 0,
                                                       "failed_outputs": result.failed_outputs, "repro": None})
    return close_check(compiled, result, report, log)
