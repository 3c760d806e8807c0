"""What every build makes and how, a case's (``compiler.driver``) or a module file's (``compiler.module_build``):
``build_ir`` runs the named phases on a Relax module with the schedule applier, the pass recorder, the gate and the
user passes, and writes the run folder; ``Compiled`` is the build record both compiled kinds hold (the target, the
executable, what the build recorded, the run folder); ``finish_run`` completes the run folder.
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

from ..compiler.huge_pages import weights_on_huge_pages
from ..compiler.runtime import Runnable
from ..compiler.weights import WeightCache
from ..instrument.idle_passes import IdlePassWatch, idle_disabled
from ..instrument.pass_clock import PassClock
from ..instrument.pass_failure import RunningPasses, where_it_failed
from ..instrument.recorder import DumpOptions, PassRecord, PassRecorder
from ..instrument.run_folder import mark_complete, prune, retention
from ..passes.codegen import Launches, device_source, generated_code, kernel_launches
from ..passes.gate import PassGate, gate_summary
from ..passes.pipeline import FIRST_LOWERING_PHASE, compile_through_phases, graph_config
from ..passes.plugins import PassPlugin, extra_pass_names, resolve_extra_passes
from ..passes.target import is_gpu, runs_here, target_name
from ..schedule.apply import ApplySchedules
from ..schedule.token_rows import token_branches
from ..support.errors import BuildError, UsageError, did_you_mean, last_line
from ..support.timing import phase, transfer
from .options import DebugOptions


@dataclasses.dataclass(kw_only=True)
class Compiled(Runnable):
    """The build record of one binary, held alike by a case's (``CompiledCase``) and a module file's
    (``CompiledModule``): the resolved target, the executable, the build's seconds, what the schedule phase and the
    pass recorder recorded, and the run folder (``dump_dir``, written after the build; ``pruned_dumps`` and
    ``prune_error``: what the retention did once it was complete). Subclasses add what was built (``spec``: as
    asked) and how its inputs and outputs are named."""

    target: Target
    executable: tvm.runtime.Executable
    build_seconds: float
    debug: DebugOptions = dataclasses.field(default_factory=DebugOptions, repr=False)
    schedule_traces: dict[str, str] = dataclasses.field(default_factory=dict)  # PrimFunc -> str(sch.trace)
    device_source: str | None = None  # the generated CUDA C of a GPU build
    untuned: dict[str, str] = dataclasses.field(default_factory=dict)  # schedule "tuned": kernel -> why no record
    unscheduled: list[str] = dataclasses.field(default_factory=list)  # kernels no schedule covers (as written)
    pass_records: list[PassRecord] = dataclasses.field(default_factory=list, repr=False)  # time_passes, dumps
    gate: dict | None = None                   # what --disable-pass / --bisect-limit did (pass_gate.gate_summary)
    idle_passes: list[str] = dataclasses.field(default_factory=list)  # user passes that changed nothing: why
    optimized_module: tvm.IRModule | None = dataclasses.field(default=None, repr=False)  # entering lowering
    dump_dir: Path | None = None
    dump_seconds: float = 0.0                  # writing the dumps after the build (and, meanwhile, the JIT)
    pruned_dumps: list[str] = dataclasses.field(default_factory=list)  # old runs the retention removed
    prune_error: str | None = None             # why the retention could not remove an old run
    _vm: relax.VirtualMachine | None = dataclasses.field(default=None, repr=False)
    _weights: WeightCache = dataclasses.field(default_factory=WeightCache, repr=False)

    @property
    def schedule(self) -> str:
        return self.spec.schedule

    @property
    def huge_page_weights(self) -> bool:
        return weights_on_huge_pages(self.target)

    @property
    def name(self) -> str:
        """How reports and run folders name the build: the case's, or the module file's."""
        raise NotImplementedError

    def launches(self) -> Launches:
        """The kernels one call of a GPU build launches (``passes.codegen.kernel_launches``)."""
        return kernel_launches(self.executable, self.device_source or "", token_branches(self.optimized_module))


def _check_disabled_names(gate: PassGate, records: list[PassRecord]) -> None:
    ran = {r.name for r in records}
    for name in sorted(gate.disabled - ran):
        raise UsageError(f"--disable-pass {name}: no pass of that name runs{did_you_mean(name, ran)}")



def finish_run(compiled: Compiled) -> None:
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


@dataclasses.dataclass
class _Lowered:
    """What the pipeline made: the executable and what the build recorded."""

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
             wrap: Callable[..., Compiled], seconds_before: float = 0.0) -> Compiled:
    """Run the named phases on the Relax module ``make_module()`` (made once the pass recorder is ready) for
    ``tgt`` with ``debug``'s dumps, timing, gate and user passes, and ``wrap(**fields)`` the result: the
    compiled kind made from the build record's fields (``Compiled``; ``seconds_before``: time spent before,
    loading a module file, counted in its ``build_seconds``); its runtime is made while the dumps are written.
    ``name`` says what is built in messages, ``meta`` heads the run folder. Shared by the cases and the module
    files: prepare -> module -> lower (a failure as one line) -> wrap -> dumps."""
    b = _prepare(name, tgt, applier, debug, meta)
    t0 = time.perf_counter()  # the build's seconds: making the module too (an export and import can dominate)
    mod = make_module()
    with contextlib.closing(b.recorder) if b.recorder is not None else contextlib.nullcontext():  # its printer
        if b.recorder is not None:
            b.recorder.record_input(mod)
        built = _lower(b, mod, t0)
        compiled = wrap(target=tgt, executable=built.executable, build_seconds=seconds_before + built.seconds,
                        debug=debug, schedule_traces=dict(applier.traces), device_source=built.source,
                        untuned=dict(applier.untuned), unscheduled=list(applier.unscheduled),
                        pass_records=built.records, gate=built.gate, idle_passes=built.idle_passes,
                        optimized_module=built.optimized)
        if b.recorder is not None:
            _write_dumps(b, built, compiled)
        return compiled


def _lower(b: _Build, mod: tvm.IRModule, t0: float) -> _Lowered:
    """The pipeline on ``mod``, and what the build recorded (its seconds since ``t0``); a failure as one line
    (``_failed``)."""
    captured, clock, running, passes_seen = {}, PassClock(), RunningPasses(), {}
    watch = IdlePassWatch({phase: [p.info.name for p in passes] for phase, passes in b.extra.items()})

    def on_phase(phase_name, m):
        if phase_name == FIRST_LOWERING_PHASE:
            captured["optimized"] = m

    try:
        with phase("codegen"), tvm.transform.PassContext(opt_level=3, config=graph_config(b.meta.get("cuda_graph")),
                                                         instruments=[clock, running, *filter(None, [b.recorder]),
                                                                      *([watch] if b.extra else [])]):
            ex = compile_through_phases(mod, b.target, b.applier, b.extra, on_phase=on_phase,
                                        passes_seen=passes_seen)
            transfer(clock.seconds, "passes")
    except UsageError:
        raise
    except (Exception, SystemExit) as e:  # TVM errors are multi-line C++ traces; keep the last line
        _failed(b, e, running.failing(), passes_seen)
    records = b.recorder.records if b.recorder is not None else []
    _check_disabled_names(b.gate, records)
    return _Lowered(ex, time.perf_counter() - t0, device_source(ex) if is_gpu(b.target) else None, records,
                   gate_summary(records, b.gate) if b.gate.active else None, captured.get("optimized"),
                   [p.describe(_user_passes(b.debug)) for p in watch.idle()]
                   + (idle_disabled(b.recorder.disabled_inputs, b.target) if b.recorder is not None else []))


def _failed(b: _Build, e: BaseException, running: list, passes_seen: dict):
    """Raise a failed build as one line (a user pass's failure as a UsageError naming it; TVM's, naming the pass
    and what it was processing: ``instrument.pass_failure``), its dumps complete."""
    debug, name = b.debug, b.name
    exited = isinstance(e, SystemExit)  # a user pass called sys.exit (passes.pipeline registers it)
    in_plugin = None if exited else _plugin_frame(debug, e)
    if exited or in_plugin:
        message = (f"{_user_passes(debug)} called sys.exit({e.code!r}) during the build of {name}; user code "
                   "must return, not exit") if exited else (
            f"{_user_passes(debug)} raised {type(e).__name__} in {in_plugin} during the build of {name}: "
            f"{last_line(e)}")
    else:
        place = where_it_failed(running, passes_seen)
        message = f"{place}: {last_line(e)}" if place else last_line(e)
    run_dir = _finish_dumps(b.recorder, b.meta, error=message) if b.recorder is not None else None
    if run_dir is not None:
        mark_complete(run_dir)
    where = f" (IR dumps: {run_dir})" if run_dir else ""
    if exited or in_plugin:
        raise UsageError(message + where) from None
    raise BuildError(f"build of {name} for {target_name(b.target)} failed {message}{where}"
                     if message.startswith("in pass") else
                     f"build of {name} for {target_name(b.target)} failed: {message}{where}",
                     place, last_line(e)) from e


def _write_dumps(b: _Build, built: _Lowered, compiled: Compiled) -> None:
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
