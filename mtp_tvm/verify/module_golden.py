"""The golden check of a user's module file: its outputs on the example inputs against the reference, compared as
``torch.testing.assert_close`` does (every element within ``atol + rtol * |expected|``, the same dtype),
with its default tolerances for the output's dtype unless the user gives ``atol``/``rtol``.

The reference of a torch model is the model run eagerly by torch (at another ``--shape``: its exported program, run
by torch); that of a TVMScript module is the same module built for the CPU with no schedule and no optional pass (a
differential check: ``reference_build``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from ..compiler.arrays import dtype_name, to_numpy
from ..contract.presets import NO_PRESET
from ..passes.target import target_json
from ..support.lazy import lazy_module
from ..support.timing import phase
from ..verify.comparators import Comparison, ratio_allclose
from ..verify.golden_check import Provenance, timed_run
from ..verify.results import CheckResult, OutputCheck
from ..verify.tolerances import ModuleTolerance

if TYPE_CHECKING:  # the compiler is imported where a golden is computed: a stored one is checked by the runtime alone
    from ..compiler.module_build import CompiledModule

torch = lazy_module("torch")


def assert_close(actual, expected, tolerance: ModuleTolerance) -> Comparison:
    """One output compared as ``torch.testing.assert_close`` would (no element may be off), reported as every
    comparator is (worst point, mismatch count)."""
    a_dtype, e_dtype = dtype_name(actual), dtype_name(expected)
    exact = tolerance.for_dtype(e_dtype)
    name = "bitwise_equal" if exact.exact else f"assert_close(atol={exact.atol:g}, rtol={exact.rtol:g}" + (
        f", max_error_ratio={exact.max_error_ratio:g})" if exact.max_error_ratio else ")")
    if a_dtype != e_dtype:
        return Comparison(name, False, int(np.size(actual)), detail=f"dtype mismatch: actual {a_dtype} vs expected "
                                                                   f"{e_dtype}")
    a, e = np.asarray(actual), np.asarray(expected)
    if a.dtype.kind in "biu":  # integers and booleans exactly, in their own type (FP32 holds no int64 exactly)
        return _exact(name, a, e)
    if a.dtype.kind == "f" or a_dtype == "bfloat16":  # equal infinities are equal, as in torch (a causal mask's)
        same_inf = np.isinf(a.astype(np.float32)) & (a == e)
        a, e = np.where(same_inf, 0, a).astype(a.dtype), np.where(same_inf, 0, e).astype(e.dtype)
    result = ratio_allclose(exact)(a, e)
    return dataclasses.replace(result, comparator=name)


def _exact(name: str, a: np.ndarray, e: np.ndarray) -> Comparison:
    """Integers or booleans compared element by element: any difference is a mismatch."""
    if a.shape != e.shape:
        return Comparison(name, False, int(a.size), detail=f"shape mismatch: actual {a.shape} vs expected {e.shape}")
    bad = a != e
    count = int(bad.sum())
    if not count:
        return Comparison(name, True, int(a.size), worst_index=(0,) * a.ndim if a.size else ())
    diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    return Comparison(name, False, int(a.size), count, float(diff[worst]), worst,
                      detail=f"Mismatched elements: {count} / {a.size}: integers and booleans must be equal")


def module_golden(compiled: CompiledModule, inputs: dict | None = None) -> dict[str, np.ndarray]:
    """The reference outputs of the module file on its example inputs: a torch model's, run eagerly when it was
    loaded (``ir.module_file``, in the file's child process), or those of the TVMScript module built with no
    schedule. On other ``inputs`` (``--shape``), a torch model's reference is its exported program run by torch
    in this process (the ATen graph TVM imported; the user's file is not run again, so it cannot decide the
    verdict), a TVMScript module's that reference build's."""
    from ..ir.module_file import TORCH, to_torch

    user = compiled.module_file
    if inputs is None:
        return dict(user.reference) if user.kind == TORCH else reference_build(compiled).run(user.examples)
    if user.kind != TORCH:
        return reference_build(compiled).run(inputs)
    with torch.no_grad():  # the exported program's ATen graph: no line of the user's file runs in this process
        out = user.program.module()(*(to_torch(inputs[name]) for name in user.activation_names))
    leaves, _ = torch.utils._pytree.tree_flatten(out)
    return {name: to_numpy(t) for name, t in zip(user.output_names, leaves)}


def reference_build(compiled: CompiledModule) -> CompiledModule:
    """The same module built for this CPU with no schedule and no optional pass: the golden of a TVMScript module
    (a GPU has no unscheduled build: its kernels need threads bound, so a CUDA binary is checked against the CPU's)."""
    from ..compiler.driver import compile_open
    from ..compiler.options import DebugOptions
    from ..schedule.files import NONE

    spec = dataclasses.replace(compiled.spec, target="llvm", schedule=NONE)
    return compile_open(spec, DebugOptions(bisect_limit=0), loaded=compiled.module_file)


def check_outputs(name: str, shapes: dict, built: Provenance, actual: dict, expected: dict,
                  tolerance: ModuleTolerance, run_seconds: float, seed: int = 0) -> CheckResult:
    """The verdict of every output (``expected``'s names), as the ``CheckResult`` cases report (the table, the
    JSON report); ``shapes``: the example activations' shapes."""
    outputs = {out: OutputCheck(out, [assert_close(actual[out], expected[out], tolerance)]) for out in expected}
    return CheckResult(name, built.target, NO_PRESET, built.frontend, seed, shapes, outputs, built.build_seconds,
                       run_seconds, str(built.dump_dir) if built.dump_dir else None, schedule=built.schedule)


def golden_check_module(compiled: CompiledModule, tolerance: ModuleTolerance, log=print,
                        expected: dict | None = None, inputs: dict | None = None, seed: int = 0) -> CheckResult:
    """Run ``compiled`` on ``inputs`` (default the file's example inputs) and compare with the reference computed
    on them (``expected``: already computed)."""
    given = inputs is not None
    inputs = inputs if given else compiled.module_file.examples
    shapes = {n: list(np.shape(inputs[n])) for n in compiled.module_file.activation_names}
    log(f"[RUN] {'inputs at --shape' if given else 'example inputs'}: "
        f"{', '.join(f'{n}{s}' for n, s in shapes.items())}")
    timed = timed_run(compiled.run, inputs)
    with phase("golden"):
        expected = expected if expected is not None else module_golden(compiled, inputs if given else None)
    built = Provenance(target_json(compiled.target), compiled.frontend, compiled.schedule, compiled.build_seconds,
                       compiled.dump_dir)
    return dataclasses.replace(check_outputs(compiled.name, shapes, built, timed.outputs, expected, tolerance,
                                             timed.seconds, seed),
                               first_call_seconds=timed.first_call_seconds)
