"""``check --module FILE.py``: build the user's own module file, run it on its example inputs and compare with
its reference (``verify.module_golden``), the verdict in the run folder's index as a case's. Every debugging
option of a case's build applies (they are ``DebugOptions``); ``--profile`` times its kernels."""

from __future__ import annotations

from ..compiler.options import DebugOptions
from ..compiler.runtime import threads_wanted
from ..compiler.user_build import ModuleSpec, compile_module_open, split_module_options
from ..instrument.run_folder import update_index
from ..passes.target import require_runs_here, resolve_target
from ..support.timing import phase
from ..verify.golden_check import validate_check_args
from ..verify.module_golden import ModuleTolerance, golden_check_module
from ..verify.results import CheckResult
from .check import checking, close_check
from .profile import ProfileOptions, profile_options, write_to_run_folder
from .profile import profile as profile_main


def check_module(module=None, debug: DebugOptions | None = None, *, spec: ModuleSpec | None = None,
                 atol: float | None = None, rtol: float | None = None, report=None,
                 profile: bool | ProfileOptions = False, log=print, **options) -> CheckResult:
    """Build the module file ``module`` (keywords: ``target``, ``schedule`` and the fields of ``DebugOptions``),
    run it on ``example_inputs()`` and compare every output with the reference (torch eagerly, or the module
    built for the CPU with no schedule and no optional pass), as ``torch.testing.assert_close`` with its default
    tolerances per dtype unless ``atol``/``rtol`` are given."""
    spec, debug = split_module_options(module, spec, debug, options, "check_module")
    tolerance = ModuleTolerance(atol, rtol)
    validate_check_args(0, None, report, log)
    threads_wanted()
    profiling = profile_options(profile)
    require_runs_here(resolve_target(spec.target))
    log(f"[BUILD] module={spec.module} schedule={spec.schedule}")
    compiled = compile_module_open(spec=spec, debug=debug)
    with checking(compiled):
        if compiled.unscheduled:
            log(f"[schedule] no {spec.schedule!r} schedule covers {', '.join(compiled.unscheduled)}: lowered as "
                "written")
        for kernel, why in compiled.untuned.items():
            log(f"[tuned] {kernel}: {why}; its hand schedule is used")
        result = golden_check_module(compiled, tolerance, log)
        result.gate, result.pass_records = compiled.gate, compiled.pass_records
        if profiling is not None:
            log(f"[PROFILE] {profiling.rounds} rounds")
            result.profile = profile_main(compiled, compiled.user.examples, profiling)
            if compiled.dump_dir is not None:
                write_to_run_folder(result.profile, compiled.dump_dir)
        if compiled.dump_dir is not None:
            with phase("dumps"):
                update_index(compiled.dump_dir, check={"passed": result.passed, "seed": 0,
                                                       "failed_outputs": result.failed_outputs, "repro": None})
    return close_check(compiled, result, report, log)
