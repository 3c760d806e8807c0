"""What a module file's artifact stores beside its binary (``artifact.module_artifact`` writes them): its example
inputs, parameters included, and their reference outputs; read back by ``run`` and ``check --artifact``, which
need neither the file nor torch."""

from __future__ import annotations

import time
from pathlib import Path

from ..artifact.manifest import artifact_file
from ..compiler.arrays import read_npz
from ..ir.module_sizes import sized_inputs
from ..support.errors import UsageError
from ..verify.golden_check import Provenance
from ..verify.module_golden import check_outputs
from ..verify.results import CheckResult
from ..verify.tolerances import ModuleTolerance

EXAMPLE_INPUTS = "example_inputs.npz"
REFERENCE_OUTPUTS = "reference_outputs.npz"


def stored_arrays(folder: Path, m: dict, key: str) -> dict:
    """The arrays of one stored file (``key``: ``example_inputs`` or ``reference_outputs`` of the module section
    of the manifest ``m``), named as the manifest's inputs or outputs (refused otherwise)."""
    section = "inputs" if key == "example_inputs" else "outputs"
    specs = m[section]
    path = artifact_file(folder, m["module"][key])
    arrays = read_npz(path, {n: s["dtype"] for n, s in specs.items()})
    if set(arrays) != set(specs):
        raise UsageError(f"{path} holds {', '.join(sorted(arrays))}; the manifest's {section} are "
                         f"{', '.join(specs)}")
    return arrays


def stored_inputs(artifact, tokens: int | None, seed: int, shapes: dict | None = None) -> dict:
    """A module file's artifact runs on its stored example inputs, or with ``shapes`` (input name -> shape) on
    activations drawn from ``seed`` at that size (``ir/module_sizes.py``; the bounds as the manifest stores
    them) with its stored parameters. No token count applies."""
    if tokens is not None or (seed and not shapes):
        raise UsageError(f"{artifact.path} is a module file's artifact: it runs on its stored example inputs, or "
                         "at --shape NAME=DIM,... on seeded ones; --tokens does not apply")
    stored = stored_arrays(artifact.path, artifact.manifest, "example_inputs")
    if not shapes:
        return stored
    module = artifact.manifest["module"]
    bounds = {d: (low, high) for d, (low, high) in module.get("dim_bounds", {}).items()}
    specs = artifact.input_specs
    return sized_inputs(specs, tuple(specs)[: module["num_input"]], stored, shapes, bounds, seed,
                        module.get("dim_names", {}))


def check_module_artifact(artifact, seed: int, tokens: int | None, tolerance, report,
                          log=print) -> CheckResult:
    """Run the stored example inputs and compare with the stored reference outputs (``assert_close``'s
    tolerances per dtype)."""
    if tolerance is not None:
        raise UsageError("a module file's artifact is checked with assert_close's tolerances; tolerance does not "
                         "apply")
    inputs = stored_inputs(artifact, tokens, seed)
    log(f"[RUN] stored example inputs of {artifact.manifest['module']['path']}")
    t0 = time.perf_counter()
    actual = artifact.run(inputs)
    seconds = time.perf_counter() - t0
    m = artifact.manifest
    built = Provenance(m["target"], m["frontend"], m["schedule"]["name"], m["build"]["compile_seconds"])
    result = check_outputs(m["case"], m["shapes"], built, actual, stored_arrays(artifact.path, m, "reference_outputs"),
                           ModuleTolerance(), seconds)
    if report is not None:
        result.write_report(report)
    return result
