"""``check --module FILE.py``: build the user's own module file, run it on its example inputs and compare with
its reference (``verify.module_golden``), the verdict in the run folder's index as a case's. Every debugging
option of a case's build applies (they are ``DebugOptions``); ``--profile`` times its kernels."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from ...compiler.module_build import ModuleSpec, compile_module_open, split_module_options
from ...compiler.options import DebugOptions
from ...compiler.runtime import threads_wanted
from ...instrument.run_folder import update_index
from ...ir.module_file import load_module_file
from ...passes.target import require_runs_here, resolve_target
from ...support.errors import UsageError
from ...support.timing import phase
from ...verify.golden_check import validate_check_args
from ...verify.module_golden import golden_check_module
from ...verify.results import CheckResult
from ...verify.tolerances import ModuleTolerance
from ..measure.profile import ProfileOptions, profile_options
from .check import checking, close_check, log_schedule_gaps, profile_into_run
from .kernel_calls import nan_origin, record
from .kernel_repro import KERNEL_REPRO_DIR
from .module_repro import module_reproducers


def check_module(module=None, debug: DebugOptions | None = None, *, spec: ModuleSpec | None = None,
                 tolerance: ModuleTolerance | Mapping | None = None, report=None,
                 profile: bool | ProfileOptions = False, shapes: Mapping | None = None, seed: int = 0,
                 nan_check: bool = False, log=print, **options) -> CheckResult:
    """Build the module file ``module`` (keywords: ``target``, ``schedule`` and the fields of ``DebugOptions``),
    run it on ``example_inputs()`` and compare every output with the reference (torch eagerly, or the module
    built for the CPU with no schedule and no optional pass), as ``torch.testing.assert_close`` with its default
    tolerances per dtype unless ``tolerance`` (a ``ModuleTolerance`` or a dict with ``atol``/``rtol``) sets
    them. ``shapes`` (input name -> shape, within ``dynamic_shapes()``'s bounds): run and compare at that size
    instead, on inputs drawn from ``seed``, the reference recomputed there (a torch model's by its exported
    program: ``verify.module_golden``). ``nan_check``: name the first kernel
    call whose output holds NaN/Inf (``result.nan_origin``)."""
    spec, debug = split_module_options(module, spec, debug, options, "check_module")
    tolerance = ModuleTolerance.of(tolerance)
    validate_check_args(seed, report, log)
    if seed and not shapes:
        raise UsageError("a module file runs on its example_inputs(): a seed draws inputs only at another --shape")
    threads_wanted()
    profiling = profile_options(profile)
    require_runs_here(resolve_target(spec.target))
    log(f"[BUILD] module={spec.module} schedule={spec.schedule}")
    with phase("build"):
        user = load_module_file(spec.module)
    inputs = user.inputs_at(dict(shapes), seed) if shapes else user.examples  # a bad size: refused before the build
    compiled = compile_module_open(spec=spec, debug=debug, loaded=user)
    with checking(compiled):
        log_schedule_gaps(compiled, log)
        verdict = golden_check_module(compiled, tolerance, log, inputs=inputs if shapes else None, seed=seed)
        nan = {"nan_checked": True, "nan_origin": nan_origin(record(compiled, inputs))} if nan_check else {}
        result = dataclasses.replace(
            verdict, gate=compiled.gate, pass_records=compiled.pass_records,
            profile=None if profiling is None else profile_into_run(compiled, inputs, profiling, log), **nan)
        with phase("dumps"):
            if not result.passed:
                result = dataclasses.replace(result, **module_reproducers(compiled, result, inputs, tolerance, shapes,
                                                                          seed, debug.dump_root, log))
            if compiled.dump_dir is not None:
                repro = os.path.relpath(result.repro_dir, compiled.dump_dir) if result.repro_dir else None
                kernel = {"kernel_repro": KERNEL_REPRO_DIR} if result.kernel_repro_dir else {}
                update_index(compiled.dump_dir, check={"passed": result.passed, "seed": seed, "repro": repro,
                                                       "failed_outputs": result.failed_outputs, **kernel})
    return close_check(compiled, result, report, log)
