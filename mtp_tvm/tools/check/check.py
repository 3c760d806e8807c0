"""``check``: the main job. Build a case or a module file, run it (a case on seeded inputs, a module file on its
example inputs or at ``--shape``), golden-check every output (a case's stages against torch, a module file against
its reference), and leave a reproducer when it fails. One verb, a strategy per kind (``CaseCheck``,
``ModuleCheck``: how it builds, its inputs, its verdict, its reproducers' record and command line); the build,
the debugging options, the profile, the NaN check, the run folder's verdict and the report are the same for
both."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
from collections.abc import Mapping

from ...artifact.export import build_target, parse_archs
from ...compiler.arrays import to_numpy
from ...compiler.compiled import Compiled, finish_run
from ...compiler.driver import CompiledCase
from ...compiler.module_build import CompiledModule
from ...compiler.options import BuildSpec, DebugOptions, Spec
from ...compiler.runtime import threads_wanted
from ...compiler.tensors import to_host
from ...instrument.run_folder import retention, update_index
from ...passes.plugins import extra_pass_names, resolve_extra_passes
from ...passes.target import require_runs_here, resolve_target, target_json
from ...support.errors import MtpError, UsageError
from ...support.timing import phase
from ...verify.golden_check import (
    LM_HEAD_LOGITS,
    GoldenOptions,
    Provenance,
    golden_check,
    logit_perturbation,
    seeded_golden,
    validate_check_args,
)
from ...verify.module_golden import golden_check_module, module_golden
from ...verify.results import CheckResult, ProfileReport
from ...verify.subject import CaseSubject, ModuleSubject, Subject, subject_of
from ...verify.tolerances import LogitsTolerance, ModuleTolerance, RatioTolerance, Tolerance
from ..measure.profile import ProfileOptions, profile_options, write_to_run_folder
from ..measure.profile import profile as profile_main
from .kernel_calls import nan_origin, record
from .kernel_repro import KERNEL_REPRO_DIR
from .localize import localize_failure
from .repro import ReproRecord, write_repro


def check(spec: Spec | Subject | str | os.PathLike | None = None, debug: DebugOptions | None = None, *, seed: int = 0,
          report: str | os.PathLike | None = None,
          tolerance: Tolerance | RatioTolerance | ModuleTolerance | Mapping | None = None,
          logits_tol: LogitsTolerance | Mapping | None = None, perturb_logit: tuple | None = None,
          shapes: Mapping | None = None, profile: bool | ProfileOptions = False, nan_check: bool = False,
          weights: Mapping | None = None, arch: str | None = None, log=print, **options) -> CheckResult:
    """Build ``spec`` (a ``verify.subject.Subject``, or what makes one; keywords: the fields of its spec and of
    ``DebugOptions``, as for ``compile``), run it and compare its outputs with their golden: a case (``BuildSpec``)
    on inputs drawn from ``seed``, each stage against torch; a module file (its path, a ``ModuleSpec`` or
    ``module=``) on its ``example_inputs()`` against its reference (torch eagerly, or the module built for the CPU
    with no schedule and no optional pass), as ``torch.testing.assert_close`` with its default tolerances per
    dtype.

    ``tolerance``: a ``Tolerance`` (the fields given replace those of every comparison: a case's outputs, its
    LM-head logits unless ``logits_tol`` is given, a module file's outputs; ``exact``: bitwise equality); or a
    case's every output's ``ratio_allclose`` (a ``RatioTolerance``, or a dict of some of its fields); a module
    file's ``ModuleTolerance`` (or a dict of some of its fields). For the LM-head cases: ``logits_tol`` (a
    ``LogitsTolerance`` or a dict of some of its fields: atol, rtol, max_error_ratio, exact, max_e2e_abs_diff),
    ``perturb_logit=(owner, row, col[, delta])`` adds delta (default 1.0) to one device logit
    before the comparison. ``arch`` (a case for the cuda target: ``"sm_80,sm_90"``): the CUDA archs to build for.
    ``weights``: some or all of a case's weight inputs by name (``load_weights``) in place of the seeded ones, the
    golden computed on them. ``shapes`` (a module file: input name -> shape, within ``dynamic_shapes()``'s bounds):
    run and compare at that size instead, on inputs drawn from ``seed``, the
    reference recomputed there (a torch model's by its exported program: ``verify.module_golden``).

    When the check fails (and no perturbation caused it), a reproducer is written to ``repro/`` in the run folder
    (a new one under ``dumps/`` when not dumping). ``profile`` (True or ``ProfileOptions``): time every kernel of
    ``main`` afterwards (``tools/measure/profile.py``) into ``result.profile``, and ``profile.json`` into the run
    folder when dumping. ``nan_check``: name the first kernel call whose output holds NaN/Inf
    (``result.nan_origin``). A failing check that dumps also compares every kernel call with a ``schedule=none``
    build and writes ``kernel_repro/`` beside ``repro/`` (``tools/check/localize.py``).
    """
    subject, debug = subject_of(spec, debug, options, "check")
    validate_check_args(seed, report, log)
    if isinstance(subject, ModuleSubject):
        _refuse_given("a module file runs on its example inputs against its reference", logits_tol=logits_tol,
                      perturb_logit=perturb_logit, weights=weights, arch=arch)
        judge = ModuleCheck.of(subject, tolerance, shapes, seed)
    else:
        _refuse_given("a case is sized by its preset and tokens", shapes=shapes)
        if arch is not None:
            subject = subject.rebuilt(dataclasses.replace(subject.spec, target=build_target(subject.spec.target,
                                                                                             parse_archs(arch))))
        judge = CaseCheck(subject, _golden_options(subject.spec, seed, tolerance, logits_tol, perturb_logit), weights)
    threads_wanted()  # a bad TVM_NUM_THREADS fails before the build, not after it
    profiling = profile_options(profile)
    require_runs_here(subject.spec.resolved_target)
    compiled = judge.build(debug, log)
    with checking(compiled):
        result = _check_built(compiled, judge, debug, profiling, nan_check, log)
    return close_check(compiled, result, report, log)


def _refuse_given(why: str, **given) -> None:
    """Keywords of ``check`` for the other kind of build: refused, naming them, rather than ignored."""
    named = [name for name, value in given.items() if value is not None]
    if named:
        raise UsageError(f"check(): {', '.join(named)} cannot apply ({why}); drop "
                         + ("it" if len(named) == 1 else "them"))


@dataclasses.dataclass
class CaseCheck:
    """How a case is checked (``GoldenOptions``, the weights given); the seeded inputs and goldens are drawn once
    it is built (``golden``). ``ModuleCheck`` is a module file's."""

    subject: CaseSubject
    options: GoldenOptions
    weights: Mapping | None
    golden: tuple[dict, dict] | None = None

    @property
    def seed(self) -> int:
        return self.options.seed

    @property
    def tolerance(self) -> RatioTolerance:
        return self.options.tolerance

    @property
    def inputs(self) -> dict:
        return self.golden[0]

    def build(self, debug: DebugOptions, log) -> CompiledCase:
        log(f"[BUILD] {self.subject.describe()}")
        return self.subject.build(debug, open_run=True)

    def verdict(self, compiled: CompiledCase, log) -> CheckResult:
        c, s = compiled.case, compiled.shapes
        self.golden = seeded_golden(c, s, self.seed, self.weights)
        built = Provenance(target_json(compiled.target), compiled.frontend, compiled.schedule,
                           compiled.build_seconds, compiled.dump_dir)
        return golden_check(compiled.run, c, s, built, self.options, golden=self.golden, log=log)

    def reproducers(self, compiled: CompiledCase, result: CheckResult, dump_root, log) -> dict:
        """``reproducers``, none when a perturbation made it fail."""
        if self.options.perturbation is not None:
            return {}
        return reproducers(self, compiled, result, dump_root, log)

    def repro_record(self, compiled: CompiledCase, _result: CheckResult) -> ReproRecord:
        s, options = compiled.shapes, self.options
        fields = {"case": compiled.case.name, "preset": s.preset.name, "frontend": compiled.frontend,
                  "tokens": s.tokens, "vocab_shard": s.vocab_shard, "owners": s.owners, "tp": s.tp,
                  "seed": options.seed, "tolerance": dataclasses.asdict(options.tolerance),
                  "logits_tol": dataclasses.asdict(options.logits_tol)}
        return ReproRecord("case", fields, *self.golden, self.command(compiled))

    def command(self, compiled: CompiledCase) -> str:
        """The ``mtp-tvm check`` command line that rebuilds this case with the same options (the sizes as
        resolved, the target as JSON unless it is the plain ``llvm``/``cuda``), and notes for what only the API
        can say."""
        tj = target_json(compiled.target)
        short = next((n for n in ("llvm", "cuda") if target_json(resolve_target(n)) == tj), None)
        s, options = compiled.shapes, self.options
        spec = dataclasses.replace(compiled.spec, tokens=s.tokens, vocab_shard=s.vocab_shard, owners=s.owners,
                                   tp=s.tp)
        debug = _rebuilding(compiled.debug)
        argv = ["mtp-tvm", "check", *spec.as_argv(short or json.dumps(tj)), "--seed", str(options.seed),
                *debug.as_argv()]
        notes = []
        if debug.api_only_passes:
            names = extra_pass_names(resolve_extra_passes(debug.extra_passes, compiled.target))
            notes.append(f"# plus extra passes given through the Python API: {', '.join(names)}")
        shared = Tolerance.restating(options.tolerance)  # the CLI's flags set the LM-head logits' tolerance too
        argv += shared.argv()
        implied = LogitsTolerance.of(shared)
        logits = {k: v for k, v in options.logits_tol.overrides().items() if getattr(implied, k) != v}
        if set(logits) == {"max_e2e_abs_diff"}:
            argv += ["--max-e2e-abs-diff", str(logits["max_e2e_abs_diff"])]
        elif logits:
            notes.append(f"# with logits tolerance {json.dumps(logits)} (Python API)")
        return "\n".join([shlex.join(argv), *notes]) + "\n"


@dataclasses.dataclass
class ModuleCheck:
    """How a module file is checked: ``shapes`` (input name -> shape, within ``dynamic_shapes()``'s bounds) runs
    and compares at that size on inputs drawn from ``seed``, the reference recomputed there; without it, the
    example inputs. ``inputs`` are known once the file is loaded (``build``), the reference outputs once the
    verdict computed them (``expected``: kept for the reproducer, so a TVMScript module's reference build runs
    once)."""

    subject: ModuleSubject
    tolerance: ModuleTolerance
    shapes: Mapping | None
    seed: int
    inputs: dict | None = None
    expected: dict | None = None

    @classmethod
    def of(cls, subject: ModuleSubject, tolerance, shapes: Mapping | None, seed: int) -> ModuleCheck:
        """Refused before the build: a bad tolerance, a seed without shapes."""
        tolerance = subject.tolerance(tolerance)
        if seed and not shapes:
            raise UsageError("a module file runs on its example_inputs(): a seed draws inputs only at another --shape")
        return cls(subject, tolerance, dict(shapes) if shapes else None, seed)

    def build(self, debug: DebugOptions, log) -> CompiledModule:
        log(f"[BUILD] {self.subject.describe()}")
        loaded = self.subject.loaded
        self.inputs = loaded.inputs_at(self.shapes, self.seed) if self.shapes else loaded.examples  # before the build
        return self.subject.build(debug, open_run=True)

    def verdict(self, compiled: CompiledModule, log) -> CheckResult:
        sized = self.inputs if self.shapes else None
        with phase("golden"):
            self.expected = module_golden(compiled, sized)
        return golden_check_module(compiled, self.tolerance, log, expected=self.expected, inputs=sized,
                                   seed=self.seed)

    def reproducers(self, compiled: CompiledModule, result: CheckResult, dump_root, log) -> dict:
        return reproducers(self, compiled, result, dump_root, log)

    def repro_record(self, compiled: CompiledModule, result: CheckResult) -> ReproRecord:
        """main's arguments as the built module takes them (the parameters packed), the reference outputs."""
        args = compiled.device_args([to_numpy(self.inputs[n]) for n in compiled.input_specs])
        fields = {"module": str(compiled.module_file.path), "case": compiled.name, "shapes": result.shapes,
                  "seed": result.seed, "tolerance": dataclasses.asdict(self.tolerance),
                  "returns_tuple": compiled.returns_tuple}
        return ReproRecord("module", fields, {f"arg{i}": to_host(a) for i, a in enumerate(args)}, self.expected,
                           self.command(compiled))

    def command(self, compiled: CompiledModule) -> str:
        """The ``mtp-tvm check --module`` command line that rebuilds and rechecks this build."""
        argv = ["mtp-tvm", "check", "--module", str(compiled.module_file.path), "--schedule", compiled.schedule,
                "--target", json.dumps(target_json(compiled.target)), *_rebuilding(compiled.debug).as_argv()]
        for name, shape in (self.shapes or {}).items():
            argv += ["--shape", f"{name}={','.join(map(str, shape))}"]
        argv += ["--seed", str(self.seed)] if self.seed else []
        return shlex.join(argv + Tolerance.restating(self.tolerance).argv()) + "\n"


def _rebuilding(debug: DebugOptions) -> DebugOptions:
    """A build's debugging options less what only watches it (dumps, timing): what a reproducer's command keeps."""
    return dataclasses.replace(debug, dump_passes=None, dump_only_changed=False, dump_filter=None, dump_func=None,
                               time_passes=False)


def reproducers(judge: CaseCheck | ModuleCheck, compiled: Compiled, result: CheckResult, dump_root, log) -> dict:
    """A failing check's reproducers as ``CheckResult`` fields: ``repro/`` (or why none), and with dumps
    ``kernel_repro/`` (the first kernel call that differs from a ``schedule=none`` build)."""
    found = {}
    try:
        found["repro_dir"] = str(write_repro(compiled, judge.repro_record(compiled, result), result, dump_root))
    except (MtpError, OSError) as e:  # the failure is the news: report it (exit 1), and why no reproducer
        found["repro_error"] = str(e) if isinstance(e, MtpError) else f"{e.strerror}: {e.filename}"
    if compiled.dump_dir is not None:
        log("[LOCALIZE] every kernel call against schedule=none")
        try:
            found["kernel_repro_dir"] = localize_failure(compiled, judge.seed, judge.tolerance).kernel_repro_dir
        except (MtpError, OSError) as e:
            log(f"[LOCALIZE] no kernel reproducer: {e}")
    return found


def _golden_options(spec: BuildSpec, seed: int, tolerance, logits_tol, perturb_logit) -> GoldenOptions:
    """How the case's run is judged; the LM-head options refused, before the build, for a case without it."""
    options = GoldenOptions.judging(seed, tolerance, logits_tol)
    if perturb_logit is not None and not isinstance(perturb_logit, (tuple, list)):
        raise UsageError(f"perturb_logit must be (owner, row, col[, delta]), got {perturb_logit!r}")
    case, shapes = spec.resolve()
    lm_head = case.output_specs(shapes).get(LM_HEAD_LOGITS)
    if (logits_tol is not None or perturb_logit is not None) and lm_head is None:
        raise UsageError(f"LM-head logits options apply to cases with the lm_head stage; {case.name!r} has none")
    perturbation = None if perturb_logit is None else logit_perturbation(tuple(perturb_logit), lm_head.shape)
    return dataclasses.replace(options, perturbation=perturbation)


@contextlib.contextmanager
def checking(compiled):
    """The check of a build whose run folder is open: one that raises writes no more to its run, which is then
    complete; an interrupted one stays incomplete."""
    try:
        yield
    except KeyboardInterrupt:
        raise
    except BaseException:
        finish_run(compiled)
        raise


def close_check(compiled, result: CheckResult, report: str | os.PathLike | None, log) -> CheckResult:
    """Once the verdict is in the run's index: the run complete (retention, of any process, may remove it from
    now), what the retention did, and the JSON ``report``."""
    finish_run(compiled)
    if compiled.pruned_dumps:
        log(f"[dumps] removed {len(compiled.pruned_dumps)} old run(s) beyond the newest {retention()} "
            f"(MTP_TVM_DUMPS_KEEP; `mtp-tvm dumps keep RUN` keeps one for good)")
    if compiled.prune_error:
        log(f"[dumps] retention: {compiled.prune_error}")
    if report is not None:
        with phase("dumps"):
            result.write_report(report)
    return result


def _check_built(compiled: Compiled, judge: CaseCheck | ModuleCheck, debug: DebugOptions,
                 profiling: ProfileOptions | None, nan_check: bool, log) -> CheckResult:
    """The golden check of a fresh build (a case's or a module file's, as ``judge`` says) with its profile, NaN
    origin and reproducers, made once; its verdict in the run's index."""
    log_schedule_gaps(compiled, log)
    verdict = judge.verdict(compiled, log)
    inputs = judge.inputs
    nan = {"nan_checked": True, "nan_origin": nan_origin(record(compiled, inputs))} if nan_check else {}
    result = dataclasses.replace(
        verdict, gate=compiled.gate, pass_records=compiled.pass_records,
        profile=None if profiling is None else profile_into_run(compiled, inputs, profiling, log), **nan)
    with phase("dumps"):
        if not result.passed:
            result = dataclasses.replace(result, **judge.reproducers(compiled, result, debug.dump_root, log))
        if compiled.dump_dir is not None:
            repro = os.path.relpath(result.repro_dir, compiled.dump_dir) if result.repro_dir else None
            kernel = {"kernel_repro": KERNEL_REPRO_DIR} if result.kernel_repro_dir else {}
            update_index(compiled.dump_dir, check={"passed": result.passed, "seed": judge.seed,
                                                   "failed_outputs": result.failed_outputs, "repro": repro, **kernel})
    return result


def log_schedule_gaps(compiled, log) -> None:
    """The kernels the asked schedule did not cover and the user passes that changed nothing, said before the run
    (cases and module files alike)."""
    if compiled.unscheduled:
        log(f"[schedule] no {compiled.schedule!r} schedule covers {', '.join(compiled.unscheduled)}: "
            "lowered as written")
    for kernel, why in compiled.untuned.items():
        log(f"[tuned] {kernel}: {why}; its hand schedule is used")
    for why in compiled.idle_passes:
        log(f"[passes] warning: {why}")


def profile_into_run(compiled, inputs: dict, profiling: ProfileOptions, log) -> ProfileReport:
    """``--profile``: every kernel of ``main`` timed on ``inputs``; ``profile.json`` into the run folder when
    dumping."""
    log(f"[PROFILE] {profiling.rounds} rounds")
    with phase("profile"):
        found = profile_main(compiled, inputs, profiling)
    if compiled.dump_dir is not None:
        write_to_run_folder(found, compiled.dump_dir)
    return found
