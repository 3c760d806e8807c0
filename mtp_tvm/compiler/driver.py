"""``compile``: a case -> one TVM binary (``CompiledCase``) with typed input/output specs and ``run(dict) -> dict``.
It builds the Relax module (``ir``), runs the named phases (``passes``) with the schedule applier
(``schedule``) and the pass recorder (``instrument``) when debugging, and writes the run folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import tvm
from tvm import relax
from tvm.target import Target

from ..compiler.runtime import Runnable
from ..compiler.weights import WeightCache
from ..contract.cases import ROWS, TOKENS, Case, TensorSpec
from ..contract.presets import Shapes, make_shapes
from ..instrument.idle_passes import IdlePassWatch, idle_disabled
from ..instrument.pass_clock import PassClock
from ..instrument.recorder import DumpOptions, PassRecord, PassRecorder
from ..instrument.run_folder import mark_complete, prune, retention
from ..ir.model import build_relax_module
from ..passes.codegen import Launches, device_source, generated_code, kernel_launches
from ..passes.gate import PassGate, gate_summary
from ..passes.pipeline import FIRST_LOWERING_PHASE, compile_through_phases, graph_config, plan_graph_capture
from ..passes.plugins import PassPlugin, extra_pass_names, resolve_extra_passes
from ..passes.target import (
    device_for,
    is_gpu,
    resolve_target,
    runs_here,
    target_json,
    target_name,
)
from ..schedule.apply import ApplySchedules
from ..schedule.files import TUNED
from ..schedule.token_rows import token_branches
from ..schedule.tuned import tuned_dir
from ..support.errors import BuildError, UsageError, did_you_mean, last_line
from ..support.native_log import native_stderr
from ..support.timing import phase, transfer
from .options import CUDA_GRAPH_ROWS, BuildSpec, DebugOptions, split_options

NATIVE_LOG = "tvm.log"  # in the run folder: what TVM and LLVM printed themselves during the build


@dataclasses.dataclass
class CompiledCase(Runnable):
    """One built case. ``run`` takes any token count T (the binary's token dim is symbolic). What was asked is
    ``spec`` (its frontend and schedule are this build's); ``case``, ``shapes`` and ``target`` are it resolved."""

    case: Case
    shapes: Shapes
    target: Target
    executable: tvm.runtime.Executable
    build_seconds: float
    dump_dir: Path | None = None
    schedule_traces: dict[str, str] = dataclasses.field(default_factory=dict)  # PrimFunc -> str(sch.trace)
    device_source: str | None = None  # the generated CUDA C of a GPU build
    untuned: dict[str, str] = dataclasses.field(default_factory=dict)  # schedule "tuned": kernel -> why no record
    unscheduled: list[str] = dataclasses.field(default_factory=list)  # kernels no schedule covers (as written)
    pass_records: list[PassRecord] = dataclasses.field(default_factory=list, repr=False)  # time_passes, dumps
    gate: dict | None = None                   # what --disable-pass / --bisect-limit did (pass_gate.gate_summary)
    idle_passes: list[str] = dataclasses.field(default_factory=list)  # user passes that changed nothing: why
    optimized_module: tvm.IRModule | None = dataclasses.field(default=None, repr=False)  # entering lowering
    spec: BuildSpec = dataclasses.field(default_factory=BuildSpec)  # as asked (sizes may be None: defaults)
    debug: DebugOptions = dataclasses.field(default_factory=DebugOptions, repr=False)
    pruned_dumps: list[str] = dataclasses.field(default_factory=list)  # old runs the retention removed
    prune_error: str | None = None             # why the retention could not remove an old run
    dump_seconds: float = 0.0                  # writing the dumps after the build (and, meanwhile, the JIT)
    _vm: relax.VirtualMachine | None = dataclasses.field(default=None, repr=False)
    _weights: WeightCache = dataclasses.field(default_factory=WeightCache, repr=False)

    @property
    def frontend(self) -> str:
        return self.spec.frontend

    @property
    def name(self) -> str:
        """How reports and run folders name the build (a module file's build: its own name)."""
        return self.case.name

    @property
    def schedule(self) -> str:
        return self.spec.schedule

    @property
    def input_specs(self) -> dict[str, TensorSpec]:
        return self.case.input_specs(self.shapes)

    @property
    def output_specs(self) -> dict[str, TensorSpec]:
        return self.case.output_specs(self.shapes)

    def _runtime(self):
        return self.executable, device_for(self.target), f"case {self.case.name!r}"

    @property
    def cuda_graph(self) -> bool:
        return self.spec.cuda_graph

    def launches(self) -> Launches:
        """The kernels one call of a GPU build launches (``passes.codegen.kernel_launches``)."""
        return kernel_launches(self.executable, self.device_source or "", token_branches(self.optimized_module))

    def _check_sizes(self, bound: dict[str, int]) -> None:
        tokens = bound.get(TOKENS, bound.get(ROWS, 0) * self.shapes.owners)  # T directly, or R rows per owner
        self.case.check_shapes(self.shapes, tokens)

    def sized(self, tokens: int | None = None) -> tuple[Case, Shapes]:
        s = self.shapes
        shapes = make_shapes(s.preset, s.tokens if tokens is None else tokens, s.vocab_shard, s.owners, s.tp)
        self.case.check_shapes(shapes)
        return self.case, shapes


def _check_disabled_names(gate: PassGate, records: list[PassRecord]) -> None:
    ran = {r.name for r in records}
    for name in sorted(gate.disabled - ran):
        raise UsageError(f"--disable-pass {name}: no pass of that name runs{did_you_mean(name, ran)}")


def compile(spec: BuildSpec | None = None, debug: DebugOptions | None = None, **options) -> CompiledCase:
    """Build ``spec.case`` for ``spec.target`` with the named schedule (``mtp_tvm.schedule``), recording what
    ``debug`` asks for. Keywords are the fields of ``BuildSpec`` and ``DebugOptions`` (``compile(case="tail",
    preset="tiny", dump_passes=True)``) and override ``spec``/``debug``."""
    compiled = compile_open(spec, debug, **options)
    finish_run(compiled)
    return compiled


def finish_run(compiled: CompiledCase) -> None:
    """Mark the build's run folder ``complete`` and apply its root's retention (which removes only complete
    runs): called once nothing more will be written to it (``check`` writes its verdict first)."""
    if compiled.dump_dir is None:
        return
    mark_complete(compiled.dump_dir)
    keep = retention()
    try:
        compiled.pruned_dumps = [str(p) for p in prune(compiled.dump_dir.parent, keep=keep)] if keep else []
    except UsageError as e:  # an old run this process may not remove: said, and the build stands
        compiled.prune_error = str(e)


def compile_open(spec: BuildSpec | None = None, debug: DebugOptions | None = None, **options) -> CompiledCase:
    """``compile`` leaving a run folder open (not ``complete``, so no retention removes it) for the caller to
    add to and then ``finish_run``; a failed build's run folder is complete when the error is raised."""
    spec, debug = split_options(spec, debug, options, "compile")
    with phase("build"), native_stderr() as native:  # TVM's and LLVM's own lines: into the run folder
        compiled = _compile(spec, debug.from_environment())
    if native.text and compiled.dump_dir is not None:
        with phase("dumps"):
            (compiled.dump_dir / NATIVE_LOG).write_text(native.text)
    return compiled


def _compile(spec: BuildSpec, debug: DebugOptions) -> CompiledCase:
    c, shapes = spec.resolve()
    tgt = resolve_target(spec.target)
    applier = ApplySchedules(tgt, spec.schedule, tuned_dir(tgt, c.name) if spec.schedule == TUNED else None)
    meta = {"case": c.name, "target": target_json(tgt), "preset": shapes.preset.name, "frontend": spec.frontend,
            "schedule": spec.schedule, "shapes": shapes.as_dict(), "cuda_graph": spec.cuda_graph}
    if spec.cuda_graph and not is_gpu(tgt):
        raise UsageError(f"cuda_graph needs a CUDA target, got {tgt.kind.name}")

    def module() -> tvm.IRModule:
        mod = build_relax_module(c, shapes, spec.frontend)
        return plan_graph_capture(mod, CUDA_GRAPH_ROWS) if spec.cuda_graph else mod

    return build_ir(module, c.name, tgt, applier, debug, meta,
                    lambda built: CompiledCase(
                        c, shapes, tgt, built.executable, built.seconds, schedule_traces=dict(applier.traces),
                        device_source=built.source, untuned=dict(applier.untuned),
                        unscheduled=list(applier.unscheduled), pass_records=built.records, gate=built.gate,
                        idle_passes=built.idle_passes, optimized_module=built.optimized, spec=spec, debug=debug))


@dataclasses.dataclass
class BuiltIR:
    """What ``build_ir`` made: the executable and what the build recorded."""

    executable: tvm.runtime.Executable
    seconds: float
    source: str | None
    records: list[PassRecord]
    gate: dict | None
    optimized: tvm.IRModule | None
    idle_passes: list[str]  # the user passes (and --disable-pass names) that changed nothing, and where


@dataclasses.dataclass(frozen=True)
class _Build:
    """What one build needs, resolved before anything is built: ``name`` says what is built in messages,
    ``meta`` heads its run folder."""

    name: str
    target: Target
    applier: ApplySchedules
    debug: DebugOptions
    meta: dict
    extra: dict
    gate: PassGate
    dump: DumpOptions | None
    recorder: PassRecorder | None


def _prepare(name: str, tgt: Target, applier: ApplySchedules, debug: DebugOptions, meta: dict) -> _Build:
    extra = resolve_extra_passes(debug.extra_passes, tgt)
    gate = PassGate.for_target(tgt, debug.disable_passes, debug.bisect_limit, extra_pass_names(extra))
    dump = DumpOptions(debug.dump_root, debug.dump_only_changed, debug.dump_filter, debug.dump_func,
                       debug.dump_nested) if debug.dump_passes else None
    if dump:
        retention()  # a bad MTP_TVM_DUMPS_KEEP fails before the build
    recorder = PassRecorder(gate, dump) if dump or debug.time_passes or gate.active else None
    return _Build(name, tgt, applier, debug, meta, extra, gate, dump, recorder)


def build_ir(make_module, name: str, tgt: Target, applier: ApplySchedules, debug: DebugOptions, meta: dict,
             wrap: Callable[[BuiltIR], Runnable]):
    """Run the named phases on the Relax module ``make_module()`` (made once the pass recorder is ready) for
    ``tgt`` with ``debug``'s dumps, timing, gate and user passes, and ``wrap`` the result in its runnable
    (which has ``dump_dir`` and ``dump_seconds``; its runtime is made while the dumps are written). ``name``
    says what is built in messages, ``meta`` heads the run folder. Shared by the cases and the user's own
    modules (``compiler.user_build``): prepare -> module -> lower (a failure as one line) -> wrap -> dumps."""
    b = _prepare(name, tgt, applier, debug, meta)
    t0 = time.perf_counter()  # the build's seconds: making the module too (an export and import can dominate)
    mod = make_module()
    with contextlib.closing(b.recorder) if b.recorder is not None else contextlib.nullcontext():  # its printer
        if b.recorder is not None:
            b.recorder.record_input(mod)
        built = _lower(b, mod, t0)
        compiled = wrap(built)
        if b.recorder is not None:
            _write_dumps(b, built, compiled)
        return compiled


def _lower(b: _Build, mod: tvm.IRModule, t0: float) -> BuiltIR:
    """The pipeline on ``mod``, and what the build recorded (its seconds since ``t0``); a failure as one line
    (``_failed``)."""
    captured, clock = {}, PassClock()
    watch = IdlePassWatch({phase: [p.info.name for p in passes] for phase, passes in b.extra.items()})

    def on_phase(phase_name, m):
        if phase_name == FIRST_LOWERING_PHASE:
            captured["optimized"] = m

    try:
        with phase("codegen"), tvm.transform.PassContext(opt_level=3, config=graph_config(b.meta.get("cuda_graph")),
                                                         instruments=[clock, *filter(None, [b.recorder]),
                                                                      *([watch] if b.extra else [])]):
            ex = compile_through_phases(mod, b.target, b.applier, b.extra, on_phase=on_phase)
            transfer(clock.seconds, "passes")
    except UsageError:
        raise
    except (Exception, SystemExit) as e:  # TVM errors are multi-line C++ traces; keep the last line
        _failed(b, e)
    records = b.recorder.records if b.recorder is not None else []
    _check_disabled_names(b.gate, records)
    return BuiltIR(ex, time.perf_counter() - t0, device_source(ex) if is_gpu(b.target) else None, records,
                   gate_summary(records, b.gate) if b.gate.active else None, captured.get("optimized"),
                   [p.describe(_user_passes(b.debug)) for p in watch.idle()]
                   + (idle_disabled(b.recorder.disabled_inputs, b.target) if b.recorder is not None else []))


def _failed(b: _Build, e: BaseException):
    """Raise a failed build as one line (a user pass's failure as a UsageError naming it), its dumps complete."""
    debug, name = b.debug, b.name
    exited = isinstance(e, SystemExit)  # a user pass called sys.exit (passes.pipeline registers it)
    in_plugin = None if exited else _plugin_frame(debug, e)
    message = (f"{_user_passes(debug)} called sys.exit({e.code!r}) during the build of {name}; user code "
               "must return, not exit") if exited else (
        f"{_user_passes(debug)} raised {type(e).__name__} in {in_plugin} during the build of {name}: "
        f"{last_line(e)}") if in_plugin else last_line(e)
    run_dir = _finish_dumps(b.recorder, b.meta, error=message) if b.recorder is not None else None
    if run_dir is not None:
        mark_complete(run_dir)
    where = f" (IR dumps: {run_dir})" if run_dir else ""
    if exited or in_plugin:
        raise UsageError(message + where) from None
    raise BuildError(f"build of {name} for {target_name(b.target)} failed: {message}{where}") from e


def _write_dumps(b: _Build, built: BuiltIR, compiled) -> None:
    """The run folder of a recorded build (the runtime made meanwhile, while the assembly is written)."""
    t1 = time.perf_counter()
    jit = (lambda: compiled.vm) if b.dump and runs_here(b.target) else None
    compiled.dump_dir = _finish_dumps(b.recorder, {**b.meta, "build_seconds": built.seconds,
                                                   "unscheduled": list(b.applier.unscheduled)},
                                      codegen=generated_code(built.executable, built.source) if b.dump else None,
                                      attachments={"schedule_trace.py": b.applier.trace_script()}, meanwhile=jit)
    compiled.dump_seconds = time.perf_counter() - t1


def _user_passes(debug: DebugOptions) -> str:
    return (f"pass plugin {debug.extra_passes.path}" if isinstance(debug.extra_passes, PassPlugin)
            else "a pass of extra_passes")


def _plugin_frame(debug: DebugOptions, error: BaseException) -> str | None:
    """``function (line N)`` of the pass plugin's code an exception came from (its traceback crosses TVM's FFI
    with the plugin's frames kept), None when it came from elsewhere: the plugin's bug, not a failed build."""
    if not isinstance(debug.extra_passes, PassPlugin):
        return None
    plugin = str(debug.extra_passes.path.resolve())
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == plugin]
    return f"{frames[-1].name} (line {frames[-1].lineno})" if frames else None


def _finish_dumps(recorder: PassRecorder, meta: dict, **kwargs):
    """Write the run folder (not yet ``complete``: ``finish_run``); a full disk (or any write error) is a
    one-line error, and the folder it leaves has no ``complete`` marker, so ``dumps list`` shows it as
    incomplete."""
    try:
        with phase("dumps"):
            return recorder.finish(meta, **kwargs)
    except OSError as e:
        raise UsageError(f"cannot write IR dumps ({e.strerror}): {e.filename or 'the dump folder'}") from None
