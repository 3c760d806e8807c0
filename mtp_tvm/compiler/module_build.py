"""``compile_module``: the user's own module file (``ir.module_file``) -> one TVM binary, through the same phases,
schedule applier, pass recorder and run folders as the cases (``compiler.driver.build_ir``).

A kernel no rule matches is lowered as written on CPU (named in ``unscheduled``) and gets dlight's schedule on
a GPU, as a case's would.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import tvm
from tvm import relax
from tvm.target import Target

from ..compiler.driver import build_ir, finish_run
from ..compiler.options import DebugOptions, require_path
from ..compiler.runtime import Runnable
from ..compiler.weights import WeightCache
from ..contract.cases import TensorSpec
from ..contract.presets import NO_PRESET
from ..instrument.recorder import PassRecord
from ..ir.module_file import ModuleFile, load_module_file
from ..passes.target import device_for, resolve_target, target_json
from ..schedule.apply import ApplySchedules
from ..schedule.files import NONE, TUNED, validate_schedule
from ..schedule.tuned import tuned_dir
from ..support.errors import UsageError
from ..support.native_log import native_stderr
from ..support.timing import phase

FRONTEND = "module"  # what results and run folders say made the IR: the user's file


@dataclasses.dataclass(frozen=True)
class ModuleSpec:
    """One binary of a user's module file: ``module`` (a path) for ``target``, scheduled by ``schedule``."""

    module: str | Path
    target: object = "llvm"  # "llvm", "cuda", a target JSON dict, or a tvm Target
    schedule: str = "default"

    def __post_init__(self):
        require_path("module", self.module)
        if not isinstance(self.schedule, str):
            raise UsageError(f"schedule must be a name, got {self.schedule!r}")


@dataclasses.dataclass
class CompiledModule(Runnable):
    """A built module file: ``run(inputs) -> outputs`` (inputs named as ``main``'s parameters, outputs
    ``output0``, ``output1``...), the parameters packed once like a case's weights."""

    module_file: ModuleFile
    target: Target
    executable: tvm.runtime.Executable
    build_seconds: float
    spec: ModuleSpec
    schedule_traces: dict[str, str] = dataclasses.field(default_factory=dict)
    device_source: str | None = None
    unscheduled: list[str] = dataclasses.field(default_factory=list)
    untuned: dict[str, str] = dataclasses.field(default_factory=dict)  # schedule "tuned": kernel -> why no record
    pass_records: list[PassRecord] = dataclasses.field(default_factory=list, repr=False)
    gate: dict | None = None
    optimized_module: tvm.IRModule | None = dataclasses.field(default=None, repr=False)
    idle_passes: list[str] = dataclasses.field(default_factory=list)  # user passes that changed nothing: why
    debug: DebugOptions = dataclasses.field(default_factory=DebugOptions, repr=False)
    dump_dir: Path | None = None
    dump_seconds: float = 0.0
    pruned_dumps: list[str] = dataclasses.field(default_factory=list)
    prune_error: str | None = None
    _vm: relax.VirtualMachine | None = dataclasses.field(default=None, repr=False)
    _weights: WeightCache = dataclasses.field(default_factory=WeightCache, repr=False)

    frontend = FRONTEND

    @property
    def schedule(self) -> str:
        return self.spec.schedule

    @property
    def name(self) -> str:
        return self.module_file.name

    @property
    def input_specs(self) -> dict[str, TensorSpec]:
        return dict(self.module_file.input_specs)

    @property
    def output_specs(self) -> dict[str, TensorSpec]:
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


def compile_module(module=None, debug: DebugOptions | None = None, *, spec: ModuleSpec | None = None,
                   loaded: ModuleFile | None = None, **options) -> CompiledModule:
    """Build the module file ``module`` (keywords: ``target``, ``schedule`` and the fields of
    ``DebugOptions``), its run folder complete. ``user``: the file already loaded."""
    compiled = compile_module_open(module, debug, spec=spec, loaded=loaded, **options)
    finish_run(compiled)
    return compiled


def split_module_options(module, spec: ModuleSpec | None, debug: DebugOptions | None, options: dict,
                         where: str) -> tuple[ModuleSpec, DebugOptions]:
    """The keyword form (``compile_module("m.py", schedule="none", dump_passes=True)``) as the two
    dataclasses; an unknown keyword is an error naming it."""
    spec_fields = {f.name for f in dataclasses.fields(ModuleSpec)}
    debug_fields = {f.name for f in dataclasses.fields(DebugOptions)}
    unknown = sorted(set(options) - spec_fields - debug_fields)
    if unknown:
        raise UsageError(f"{where}() got unknown option(s) {', '.join(unknown)}")
    if module is None and spec is None:
        raise UsageError(f"{where}() needs the module file (a path to a .py file)")
    base = spec or ModuleSpec(module)
    spec = dataclasses.replace(base, **{k: v for k, v in options.items() if k in spec_fields},
                               **({"module": module} if module is not None else {}))
    debug = dataclasses.replace(debug or DebugOptions(), **{k: v for k, v in options.items() if k in debug_fields})
    return spec, debug


def compile_module_open(module=None, debug: DebugOptions | None = None, *, spec: ModuleSpec | None = None,
                        loaded: ModuleFile | None = None, **options) -> CompiledModule:
    """``compile_module`` leaving the run folder open for the caller (``check`` writes its verdict), as
    ``compiler.driver.compile_open``. ``user``: the file already loaded (its golden shares the load)."""
    spec, debug = split_module_options(module, spec, debug, options, "compile_module")
    tgt = resolve_target(spec.target)
    validate_schedule(spec.schedule, tgt)
    t0 = time.perf_counter()
    with phase("build"):  # exporting and importing the user's model is part of its build
        user = loaded or load_module_file(spec.module)
    loading = time.perf_counter() - t0
    applier = ApplySchedules(tgt, spec.schedule, tuned_dir(tgt, user.name) if spec.schedule == TUNED else None)
    meta = {"case": user.name, "module": str(user.path), "target": target_json(tgt), "preset": NO_PRESET,
            "frontend": FRONTEND, "schedule": spec.schedule, "shapes": user.example_shapes}
    debug = debug.from_environment()

    def wrap(built) -> CompiledModule:
        return CompiledModule(user, tgt, built.executable, loading + built.seconds, spec, dict(applier.traces),
                              built.source, list(applier.unscheduled), dict(applier.untuned), built.records,
                              built.gate, built.optimized, built.idle_passes, debug)

    with phase("build"), native_stderr():
        return build_ir(lambda: user.mod, user.name, tgt, applier, debug, meta, wrap)


def reference_build(compiled: CompiledModule) -> CompiledModule:
    """The same module built for this CPU with no schedule and no optional pass: the golden of a TVMScript module
    (a GPU has no unscheduled build: its kernels need threads bound, so a CUDA binary is checked against the CPU's)."""
    spec = dataclasses.replace(compiled.spec, target="llvm", schedule=NONE)
    return compile_module_open(spec=spec, debug=DebugOptions(bisect_limit=0), loaded=compiled.module_file)
