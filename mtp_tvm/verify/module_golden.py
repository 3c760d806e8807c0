"""The golden check of a user's module file: its outputs on the example inputs against the reference, compared as
``torch.testing.assert_close`` does (every element within ``atol + rtol * |expected|``, the same dtype),
with its default tolerances for the output's dtype unless the user gives ``atol``/``rtol``.

The reference of a torch model is the model run eagerly by torch; that of a TVMScript module is the same module
built for the CPU with no schedule and no optional pass (a differential check: ``compiler.user_build.reference_build``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from ..compiler.tensors import dtype_name
from ..contract.presets import NO_PRESET
from ..passes.target import target_json
from ..support.timing import phase
from ..verify.comparators import Comparison, ratio_allclose
from ..verify.golden_check import Provenance, timed_run
from ..verify.results import CheckResult, OutputCheck
from ..verify.tolerances import ModuleTolerance

if TYPE_CHECKING:  # the compiler is imported where a golden is computed: a stored one is checked by the runtime alone
    from ..compiler.user_build import CompiledModule

def assert_close(actual, expected, tolerance: ModuleTolerance) -> Comparison:
    """One output compared as ``torch.testing.assert_close`` would (no element may be off), reported as every
    comparator is (worst point, mismatch count)."""
    a_dtype, e_dtype = dtype_name(actual), dtype_name(expected)
    exact = tolerance.for_dtype(e_dtype)
    name = f"assert_close(atol={exact.atol:g}, rtol={exact.rtol:g})"
    if a_dtype != e_dtype:
        return Comparison(name, False, int(np.size(actual)), detail=f"dtype mismatch: actual {a_dtype} vs expected "
                                                                   f"{e_dtype}")
    result = ratio_allclose(exact)(actual, expected)
    return dataclasses.replace(result, comparator=name)


def module_golden(compiled: CompiledModule) -> dict[str, np.ndarray]:
    """The reference outputs of the module file on its example inputs: a torch model's, run eagerly when it was
    loaded (``ir.user_module``), or those of the TVMScript module built with no schedule."""
    from ..compiler.user_build import reference_build
    from ..ir.user_module import TORCH

    user = compiled.user
    return dict(user.reference) if user.kind == TORCH else reference_build(compiled).run(user.examples)


def check_outputs(name: str, shapes: dict, built: Provenance, actual: dict, expected: dict,
                  tolerance: ModuleTolerance, run_seconds: float) -> CheckResult:
    """The verdict of every output (``expected``'s names), as the ``CheckResult`` cases report (the table, the
    JSON report); ``shapes``: the example activations' shapes."""
    outputs = {out: OutputCheck(out, [assert_close(actual[out], expected[out], tolerance)]) for out in expected}
    return CheckResult(name, built.target, NO_PRESET, built.frontend, 0, shapes, outputs, built.build_seconds,
                       run_seconds, str(built.dump_dir) if built.dump_dir else None, schedule=built.schedule)


def golden_check_module(compiled: CompiledModule, tolerance: ModuleTolerance, log=print,
                        expected: dict | None = None) -> CheckResult:
    """Run ``compiled`` on the file's example inputs and compare with the reference (``expected``: already
    computed)."""
    inputs = compiled.user.examples
    log(f"[RUN] example inputs: {', '.join(f'{n}{list(np.shape(inputs[n]))}' for n in compiled.user.activation_names)}")
    timed = timed_run(compiled.run, inputs)
    with phase("golden"):
        expected = expected if expected is not None else module_golden(compiled)
    built = Provenance(target_json(compiled.target), compiled.frontend, compiled.schedule, compiled.build_seconds,
                       compiled.dump_dir)
    return dataclasses.replace(check_outputs(compiled.name, compiled.user.example_shapes, built, timed.outputs,
                                             expected, tolerance, timed.seconds),
                               first_call_seconds=timed.first_call_seconds)
