"""The module file's part of ``check`` (``check("FILE.py")``, ``check --module FILE.py``): the file loaded before
its build, its inputs (the example inputs, or at ``shapes`` drawn from ``seed``), the verdict against its reference
(``verify.module_golden``) and its reproducers (``module_repro``). ``tools/check/check.py`` does the rest as for a
case: the build, every debugging option (they are ``DebugOptions``), ``--profile``, the NaN check, the index."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ...compiler.driver import compile_open
from ...compiler.module_build import CompiledModule
from ...compiler.options import DebugOptions, ModuleSpec
from ...ir.module_file import load_module_file
from ...support.errors import UsageError
from ...support.timing import phase
from ...verify.module_golden import golden_check_module
from ...verify.results import CheckResult
from ...verify.tolerances import ModuleTolerance
from .module_repro import module_reproducers


@dataclasses.dataclass
class ModuleCheck:
    """How a module file is checked: ``shapes`` (input name -> shape, within ``dynamic_shapes()``'s bounds) runs
    and compares at that size on inputs drawn from ``seed``, the reference recomputed there; without it, the
    example inputs. ``inputs`` are known once the file is loaded (``build``)."""

    spec: ModuleSpec
    tolerance: ModuleTolerance
    shapes: Mapping | None
    seed: int
    inputs: dict | None = None

    @classmethod
    def of(cls, spec: ModuleSpec, tolerance, shapes: Mapping | None, seed: int) -> ModuleCheck:
        """Refused before the build: a bad tolerance, a seed without shapes."""
        tolerance = ModuleTolerance.of(tolerance)
        if seed and not shapes:
            raise UsageError("a module file runs on its example_inputs(): a seed draws inputs only at another --shape")
        return cls(spec, tolerance, dict(shapes) if shapes else None, seed)

    def build(self, debug: DebugOptions, log) -> CompiledModule:
        log(f"[BUILD] module={self.spec.module} schedule={self.spec.schedule}")
        with phase("build"):
            loaded = load_module_file(self.spec.module)
        self.inputs = loaded.inputs_at(self.shapes, self.seed) if self.shapes else loaded.examples  # before the build
        return compile_open(self.spec, debug, loaded=loaded)

    def verdict(self, compiled: CompiledModule, log) -> CheckResult:
        return golden_check_module(compiled, self.tolerance, log, inputs=self.inputs if self.shapes else None,
                                   seed=self.seed)

    def reproducers(self, compiled: CompiledModule, result: CheckResult, dump_root, log) -> dict:
        return module_reproducers(compiled, result, self.inputs, self.tolerance, self.shapes, self.seed, dump_root,
                                  log)
