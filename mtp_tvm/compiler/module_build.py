"""A user's module file (``ir.module_file``) -> one TVM binary (``CompiledModule``), through the same phases,
schedule applier, pass recorder and run folders as the cases (``compiler.compiled.build_ir``); ``compile``
(``compiler.driver``) calls it for a ``ModuleSpec``.

A kernel no rule matches is lowered as written on CPU (named in ``unscheduled``) and gets dlight's schedule on
a GPU, as a case's would.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ..contract.cases import TensorDecl
from ..contract.presets import NO_PRESET
from ..ir.module_file import ModuleFile, load_module_file
from ..passes.target import device_for, target_json
from ..schedule.apply import ApplySchedules
from ..schedule.files import TUNED, validate_schedule
from ..schedule.tuned import tuned_dir
from ..support.errors import UsageError
from .compiled import Compiled, build_ir
from .options import DebugOptions, ModuleSpec

FRONTEND = "module"  # what results and run folders say made the IR: the user's file


@dataclasses.dataclass
class CompiledModule(Compiled):
    """A built module file: ``run(inputs) -> outputs`` (inputs named as ``main``'s parameters, outputs
    ``output0``, ``output1``...), the parameters packed once like a case's weights."""

    module_file: ModuleFile
    spec: ModuleSpec

    frontend = FRONTEND

    @property
    def name(self) -> str:
        return self.module_file.name

    @property
    def input_specs(self) -> dict[str, TensorDecl]:
        return dict(self.module_file.input_specs)

    @property
    def output_specs(self) -> dict[str, TensorDecl]:
        return dict(self.module_file.output_specs)

    @property
    def num_input(self) -> int:
        return self.module_file.num_input

    def _runtime(self):
        return self.executable, device_for(self.target), f"module {self.module_file.path.name}"

    @property
    def returns_tuple(self) -> bool:
        return self.module_file.returns_tuple

    def make_inputs(self, tokens: int | None = None, seed: int = 0) -> dict[str, np.ndarray]:
        """The example inputs (and parameters) of the file; ``tokens``/``seed`` do not apply."""
        if tokens is not None or seed:
            raise UsageError(f"module {self.module_file.path.name} runs on its example_inputs(): tokens and seed "
                             "do not apply")
        return dict(self.module_file.examples)


def compile_module_file(spec: ModuleSpec, debug: DebugOptions, loaded: ModuleFile | None = None) -> CompiledModule:
    """Build the module file of ``spec`` (``loaded``: the file already loaded, e.g. to share it with its golden);
    its run folder left open, as ``compiler.driver.compile_open``'s."""
    tgt = spec.resolved_target
    validate_schedule(spec.schedule, tgt)
    t0 = time.perf_counter()  # exporting and importing the user's model is part of its build
    module_file = loaded or load_module_file(spec.module)
    loading = time.perf_counter() - t0
    name = module_file.name
    applier = ApplySchedules(tgt, spec.schedule, tuned_dir(tgt, name) if spec.schedule == TUNED else None)
    meta = {"case": name, "module": str(module_file.path), "target": target_json(tgt), "preset": NO_PRESET,
            "frontend": FRONTEND, "schedule": spec.schedule, "shapes": module_file.example_shapes}
    return build_ir(lambda: module_file.mod, name, tgt, applier, debug, meta,
                    lambda **built: CompiledModule(module_file, spec, **built), seconds_before=loading)
