"""``mtp-tvm tune``: schedule search with TVM's MetaSchedule; records persist under ``schedule.tuned.tuned_root()``
(``schedules/tuned/<target>/<case>/`` in a checkout), where ``--schedule tuned`` reads them back.

What the wing adds to MetaSchedule, and why:

- ``case_kernels`` (``kernels.py``): the PrimFuncs ``main`` calls, after legalisation, fusion and lifting
  parameter-only work (the Relax frontend's weight transposes) into ``main_transform_params``, each as its *tile
  workload* (every row count bound to the padded tile of 16: ``schedule.tuned``), so one tuned binary serves
  every T.
- ``TuneSpace``: ``hand`` (our rules as design spaces, ``schedule.space``), ``generic`` (MetaSchedule's own rules:
  multi-level tiling and friends) or ``both``; the log says how many design spaces and measured candidates
  each produced. The hand space's structural points (``hand_points``, the shipped knobs first) are measured in
  one build batch before the search and committed, so the best record is never slower than the hand schedule
  and every structure is tried once.
- ``load_tensor_intrinsics`` (``kernels.py``): ``TuneContext`` imports every tensor intrinsic TVM ships, and the
  CUDA ones alone take ~30-60 s on this machine; we import the package shell plus the target's own intrinsics.
- ``fast_build`` (``kernels.py``): MetaSchedule's default builder re-does that import in each fresh worker, so
  every candidate timed out at 30 s; ours builds without it, and on a CPU in forked children of the tuner
  (``builder.py``) instead of a fresh pool of interpreters per batch, each importing TVM and torch again.
- ``evolutionary_search``: MetaSchedule's search with its population sized to the batch it measures (its
  default of 512 is for batches of 64; ours are at most 16, and evolving 512 cost as long as the trials).
- ``ProgressCallback`` (``progress.py``): trials done of planned, best ms per kernel and per space, and the time
  left. ``Ctrl-C`` stops the search and keeps every measured record (the JSON database is appended per trial).
- RPC: ``rpc=("host:port", key)`` measures on servers registered with a TVM RPC tracker (``RPCRunner``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import tvm
from tvm.target import Target

from ...compiler.options import BuildSpec, DebugOptions, ModuleSpec
from ...compiler.runtime import threads_wanted
from ...passes.target import cpu_isa, is_gpu, runs_here
from ...schedule.bf16_dot import register_dot_intrinsics
from ...schedule.space import default_schedule, hand_points, hand_space
from ...schedule.steps import fresh_copy
from ...schedule.tune_space import TuneSpace
from ...schedule.tuned import (
    RECORDS_FILE,
    check_database,
    describe_identity,
    records_text,
    target_identity,
    tuned_dir,
    workload,
)
from ...support.errors import BuildError, UsageError, last_line
from ...support.folder_lock import folder_lock
from ...verify.subject import CaseSubject, ModuleSubject, Subject, subject_of
from ..remote import parse_tracker, require_tracker
from .kernels import case_kernels, load_tensor_intrinsics, relax_kernels
from .options import TuneOptions
from .progress import BudgetSpent, ProgressCallback, measure_callback

_MS_LOGGER = "tvm.s_tir.meta_schedule"  # its console handler prints at this logger's level
TRIALS_PER_BATCH = 16  # candidates a search step builds and measures at once (fewer when the budget is smaller)
POPULATION_PER_TRIAL = 8  # evolved candidates per measured one, as in MetaSchedule's defaults (512 for 64)
MIN_POPULATION = 64  # above the 50 unmeasured candidates MetaSchedule's search starts from (init_min_unmeasured)


@dataclasses.dataclass(frozen=True)
class TuneResult:
    work_dir: Path
    trials: int  # measured in this run (the hand points measured before the search included)
    seconds: float
    best_ms: dict[str, float]  # kernel -> best measured latency over all records in the database
    default_ms: dict[str, float]  # kernel -> its hand schedule's shipped knobs, as measured by the tuner
    spaces: dict[str, dict[str, int]]  # kernel -> space -> design spaces it generated
    measured: dict[str, dict[str, int]]  # kernel -> space -> candidates measured in this run
    interrupted: bool = False
    budget_spent: bool = False  # the search stopped at --budget seconds
    read_by_builds: bool = True  # whether ``--schedule tuned`` builds read work_dir (the default place) or not

    @property
    def seconds_per_trial(self) -> float:
        return self.seconds / self.trials if self.trials else float("nan")


def _runner(rpc: tuple[str, str] | None):
    """MetaSchedule's runner. A local one's worker processes inherit ``TVM_NUM_THREADS`` (every usable core, as
    our runtime runs: ``compiler.runtime.runtime_threads``); without it TVM's pool halves the concurrency, one
    thread on a 2-vCPU machine, and the tuner ranked candidates by single-threaded times (a parallel row loop
    measured slower than a serial one that is 2x slower in the build)."""
    from tvm.s_tir import meta_schedule as ms

    evaluator = ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=0, enable_cpu_cache_flush=False)
    if rpc is None:
        threads_wanted()
        return ms.runner.LocalRunner(evaluator_config=evaluator)
    host, port = parse_tracker(rpc[0])
    require_tracker(host, port, rpc[1])
    return ms.runner.RPCRunner(ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=rpc[1],
                                                   session_timeout_sec=120), evaluator)


def _spaces(space: TuneSpace, hand, target: Target, key: tvm.IRModule, fuse_consumers: bool = True):
    """The space generators of the kernel ``key``: ``hand`` is its hand space's ``ScheduleFn`` body, or None. The
    generic space is MetaSchedule's ``PostOrderApply`` with the target's rules; ``fuse_consumers=False`` (CPU) swaps its
    multi-level tiling for one without the write cache that computes the consumer inside the tile: where the
    consumer reads two GEMMs (``w8a8_dual_gemm``'s epilogue) that fusion fails ("requires all the producer(s)
    of the given block to be present under the target loop") and takes the whole space with it."""
    from tvm.s_tir import meta_schedule as ms

    chosen = {}
    if space.includes(TuneSpace.HAND) and hand is not None:
        chosen[TuneSpace.HAND] = ms.space_generator.ScheduleFn(hand)
    if space.includes(TuneSpace.GENERIC):
        chosen[TuneSpace.GENERIC] = ms.space_generator.PostOrderApply()
        if not fuse_consumers:
            rules = ms.TuneContext(fresh_copy(key), target=target,
                                   space_generator=chosen[TuneSpace.GENERIC]).space_generator.sch_rules
            tiling = ms.schedule_rule.MultiLevelTiling  # the LLVM default's structure and innermost limit:
            chosen[TuneSpace.GENERIC] = ms.space_generator.PostOrderApply(sch_rules=[
                tiling(structure="SSRSRS", max_innermost_factor=64) if type(r) is tiling else r for r in rules])
    return chosen


def _count_spaces(generator, key: tvm.IRModule, target: Target, name: str, seed: int) -> int:
    """How many design spaces ``generator`` makes for the workload ``key``: in a context of its own, on a copy
    (space generation edits IR nodes in place, and the committed records must replay on the workload as it was)."""
    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(fresh_copy(key), target=target, space_generator=generator, task_name=name, rand_state=seed)
    return len(ctx.generate_design_space())


class _Task(NamedTuple):
    """One kernel's search: its name, tile workload and design-space generator (its ``TuneContext`` is made when
    its trial budget is known, ``evolutionary_search``)."""

    name: str
    key: tvm.IRModule
    generator: object


def evolutionary_search(batch: int):
    """MetaSchedule's evolutionary search for batches of ``batch`` measured candidates, its population sized to
    the batch. MetaSchedule's defaults pair a population of 512 with batches of 64 (``tune_tasks``), 8 candidates
    evolved per one measured; ours are at most ``TRIALS_PER_BATCH``, and a population of 512 then costs seconds
    per batch in evolution and cost-model ranking alone (the tiny projection at 16 trials, this VM: 20 s with 512,
    9.8 s with 128, the best records alike)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.search_strategy.EvolutionarySearch(population_size=max(MIN_POPULATION, POPULATION_PER_TRIAL * batch))


def trial_budgets(names: list[str], hand_ms: dict[str, float], trials: int) -> list[int]:
    """Trials per kernel, ``trials`` in all (never more: ``--trials`` is a limit), in proportion to its hand
    schedule's time (a kernel not measured weighs the mean), largest remainders first: the time is where tuning
    can win. A kernel may get none when there are fewer trials than kernels."""
    known = [hand_ms[n] for n in names if n in hand_ms]
    mean = sum(known) / len(known) if known else 1.0
    weights = [hand_ms.get(n, mean) for n in names]
    shares = [max(trials, 0) * w / sum(weights) for w in weights] if names else []
    budgets = [int(x) for x in shares]
    for i in sorted(range(len(shares)), key=lambda i: budgets[i] - shares[i])[:max(trials, 0) - sum(budgets)]:
        budgets[i] += 1
    return budgets


def first_points(points: dict[str, list], trials: int) -> tuple[list[tuple[str, object]], str | None]:
    """The hand points to measure before the search: every kernel's shipped point (its first) before any
    kernel's other structures, at most half the ``trials`` so the search gets the rest, but every shipped point
    while ``trials`` allow (then the search gets less than half, or nothing: the second value says so)."""
    rounds = max((len(p) for p in points.values()), default=0)
    ordered = [(name, p[i]) for i in range(rounds) for name, p in points.items() if i < len(p)]
    shipped = len(points)
    chosen = ordered[:max(trials // 2, min(shipped, trials))]
    note = None
    if trials < shipped:
        note = (f"--trials {trials} is smaller than the {shipped} kernels' hand schedules: {trials} of them are "
                "measured and nothing is searched")
    elif len(chosen) > trials // 2:
        note = (f"the {shipped} kernels' hand schedules take {len(chosen)} of the {trials} trials, more than half; "
                f"the search gets {trials - len(chosen)}")
    return chosen, note


def _measure(schedules: list, target: Target, builder, runner) -> list[tuple[list[float], list] | BuildError]:
    """Schedules built and timed by the tuner's own builder and runner, all in one batch (the builder forks or
    starts its build processes per call): per schedule, (seconds per run, the arguments' info its record needs), or
    a BuildError saying why it could not be."""
    from tvm.s_tir import meta_schedule as ms

    built = builder.build([ms.builder.BuilderInput(sch.mod, target) for sch in schedules]) if schedules else []
    results = []
    for sch, b in zip(schedules, built):
        if b.error_msg:
            results.append(BuildError(f"a hand point does not build for the tuner: {last_line(b.error_msg)}"))
            continue
        args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)  # a packed weight comes packed
        (ran,) = runner.run([ms.runner.RunnerInput(b.artifact_path, "cuda" if is_gpu(target) else "cpu", args)])
        result = ran.result()
        results.append(BuildError(f"a hand point does not run in the tuner: {last_line(result.error_msg)}")
                       if result.error_msg else ([float(t) for t in result.run_secs], args))
    return results


_OPTION_FIELDS = {f.name for f in dataclasses.fields(TuneOptions)}


def tune(spec: Subject | BuildSpec | ModuleSpec | str | os.PathLike | None = None,
         options: TuneOptions | None = None, *, log: Callable[[str], None] = print, **keywords) -> TuneResult:
    """Tune the kernels of ``spec`` (a ``verify.subject.Subject``, or what makes one: a case's ``BuildSpec``, its
    target, preset, frontend and vocab shard; a module file, its path, ``ModuleSpec`` or ``module=``, or
    ``options.module`` with the spec's target) as ``options`` say; warm-starts from the database in the work dir.
    The hand schedule of a kernel without records is measured and committed first. Keywords are the fields of
    the spec and of ``TuneOptions`` and override ``spec``/``options``."""
    options = dataclasses.replace(options or TuneOptions(),
                                  **{k: keywords.pop(k) for k in list(keywords) if k in _OPTION_FIELDS})
    if options.module is not None:  # TuneOptions' way of naming a module file: the same subject
        if isinstance(spec, (ModuleSpec, ModuleSubject, str, os.PathLike)) or "module" in keywords:
            raise UsageError("tune() got a module file twice: as the subject and as TuneOptions.module")
        given = (spec.spec if isinstance(spec, Subject) else spec) or BuildSpec()  # its target is the module's
        spec = ModuleSpec(options.module, keywords.pop("target", given.target))
        options = dataclasses.replace(options, module=None)
    subject, debug = subject_of(spec, None, keywords, "tune")
    if debug != DebugOptions():
        raise UsageError("tune builds its kernels alone: debugging options do not apply")
    spec = subject.spec
    tgt = spec.resolved_target
    if tgt.kind.name == "llvm" and "num-cores" not in tgt.export():
        raise UsageError("MetaSchedule needs the llvm target's num-cores; use --target llvm or set it in the JSON")
    name, kernels_of = _kernels_of(subject)
    # an unreachable tracker fails here, in seconds, before a folder is made or anything is built
    remote = _runner(options.rpc) if options.rpc is not None else None
    if remote is None and not (runs_here(tgt) or (is_gpu(tgt) and tvm.cuda(0).exist)):
        raise UsageError(f"tune measures every candidate on its target, and a {tgt.kind.name} build does not run "
                         "here: tune where it runs, or on RPC servers with --rpc-tracker HOST:PORT --rpc-key KEY")
    out = _work_dir(options.work_dir, tgt, name)
    # MetaSchedule numbers workloads in memory and appends: two writers of one folder corrupt it
    with folder_lock(out, True, f"another `mtp-tvm tune` is writing {out}; wait for it to finish or pass "
                                "another --work-dir"):
        check_database(out)
        _require_one_target(out, tgt)
        runner = remote or _runner(None)  # the local runner's process takes seconds: once the work dir is good
        try:
            result = _Search(kernels_of, tgt, options, out, runner, log).run()
        finally:  # the local runner's worker ends with the tune, not when a garbage collection finds it
            if remote is None:
                runner.pool.shutdown(wait=False)
    return dataclasses.replace(result, read_by_builds=out.resolve() == tuned_dir(tgt, name).resolve())


def _kernels_of(subject: Subject) -> tuple[str, Callable[[Target], dict]]:
    """(what is tuned, by name; its kernels for a target): the case's, or the module file's."""
    if isinstance(subject, CaseSubject):
        return subject.spec.case, lambda tgt: case_kernels(subject.spec, tgt)
    user = subject.loaded
    return user.name, lambda tgt: relax_kernels(user.mod, tgt)


def _work_dir(work_dir, target: Target, case: str) -> Path:
    out = Path(work_dir) if work_dir is not None else tuned_dir(target, case)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot use {out} as the tuning work dir: {e.strerror}") from None
    return out


def _require_one_target(work_dir: Path, target: Target) -> None:
    """A database holds the records of one target: warm-starting from another's would seed the search (and
    skip the hand points) with code for other instructions."""
    here = target_identity(target)
    for number, line in enumerate((work_dir / RECORDS_FILE).read_bytes().splitlines()
                                  if (work_dir / RECORDS_FILE).exists() else (), 1):
        try:
            other = target_identity(Target(json.loads(line)[1][2])) if line.strip() else here
        except (ValueError, TypeError, RuntimeError) as e:  # a target this TVM does not know
            raise UsageError(f"tuning database {work_dir / RECORDS_FILE} line {number} is damaged (its target: "
                             f"{last_line(e)}); remove that line (or the folder) and tune again") from None
        if other != here:
            raise UsageError(f"{work_dir} holds records tuned for {describe_identity(other)} (line {number} of "
                             f"{RECORDS_FILE}), not for {describe_identity(here)}: tune into another --work-dir")


class _Search:
    """The search of ``tune``, holding the work dir's lock, in four steps: build the tasks (a kernel's design
    spaces, counted), measure the hand points, search, collect the best records."""

    def __init__(self, kernels_of: Callable[[Target], dict], target: Target, options: TuneOptions, out: Path, runner,
                 log):
        from tvm.s_tir import meta_schedule as ms

        from ...passes.pipeline import register_with_tvm
        from .builder import candidate_builder  # MetaSchedule's classes, imported when a tune starts

        register_with_tvm()  # Ctrl-C inside MetaSchedule's C++ loop comes back as KeyboardInterrupt
        self.target, self.options, self.out, self.runner, self.log = target, options, out, runner, log
        self.kernels = kernels_of(target)
        load_tensor_intrinsics(target)
        logging.getLogger(_MS_LOGGER).setLevel(logging.WARNING)  # full logs still go to <work_dir>/logs
        self.isa = None if is_gpu(target) else cpu_isa(target)
        self.builder = candidate_builder(target, say=log)
        register_dot_intrinsics(records_text(out))  # the database parses the records of a previous run as it loads
        self.database = ms.database.JSONDatabase(work_dir=str(out))
        self.tasks, self.default_ms, self.spaces, self.points = [], {}, {}, {}
        self.progress = ProgressCallback(options.trials, log, options.budget)

    def run(self) -> TuneResult:
        self.build_tasks()
        batch = self.measure_hand_points()
        self.log_tasks(batch)
        interrupted = self.search()
        return self.collect(interrupted)

    def build_tasks(self) -> None:
        from ...schedule.apply import ApplySchedules

        hand_schedules = ApplySchedules(self.target)
        for name, func in self.kernels.items():
            self._task(name, workload(func), hand_schedules.hand_schedule(name, func))

    def _task(self, name: str, key: tvm.IRModule, ks) -> None:
        """One kernel's tuning task: its design spaces counted (each generator anew: rules keep state), and its
        hand points when the database has no record of it yet."""
        from tvm.s_tir import meta_schedule as ms

        hand = hand_space(ks, self.isa) if ks is not None else None
        chosen = _spaces(self.options.space, hand, self.target, key)
        if not chosen:
            self.log(f"[tune] {name}: no hand schedule, so nothing to tune in the hand space (try --space both)")
            return
        self.spaces[name] = {}
        fuse = all([self._count(name, s, hand, key) for s in chosen])
        generators = [g for s, g in _spaces(self.options.space, hand, self.target, key, fuse).items()
                      if s in self.spaces[name]]
        if not generators:
            return
        if ks is not None and not self.database.has_workload(key):  # the shipped knobs, then the other structures
            self.points[name] = hand_points(key, ks, self.isa) if TuneSpace.HAND in self.spaces[name] else \
                [default_schedule(key, ks, self.isa)]
        generator = generators[0] if len(generators) == 1 else ms.space_generator.SpaceGeneratorUnion(generators)
        self.tasks.append(_Task(name, key, generator))

    def _count(self, name: str, s: str, hand, key) -> bool:
        """Count space ``s`` of kernel ``name`` into ``spaces``; whether consumer fusion could stay on (a CPU
        generic space that fails with it is counted again without it, ``_spaces``)."""
        tries, errors = ((True, False) if s == TuneSpace.GENERIC and not is_gpu(self.target) else (True,)), []
        for fusion in tries:
            try:
                self.spaces[name][s] = _count_spaces(_spaces(self.options.space, hand, self.target, key, fusion)[s],
                                                     key, self.target, name, self.options.seed)
            except (RuntimeError, ValueError, TypeError) as e:  # TVM's rules can fail on a kernel: say so
                errors.append(e)
                continue
            if errors:
                self.log(f"[tune] {name}: the generic space fails with consumer fusion ({last_line(errors[0])}); "
                         "its multi-level tiling runs without it")
            return fusion
        self.log(f"[tune] warning: {name}: the {s} space fails on this kernel ({last_line(errors[-1])}); "
                 "tuning it without")
        return True

    def measure_hand_points(self) -> list:
        """The hand points, in one build batch, committed as records before the search (they count as trials)."""
        from tvm.s_tir import meta_schedule as ms

        batch, note = first_points(self.points, self.options.trials)
        if note:
            self.log(f"[tune] {note}")
        for (name, sch), measured in zip(batch, _measure([sch for _, sch in batch], self.target, self.builder,
                                                         self.runner)):
            if isinstance(measured, BuildError):  # said, not hidden: the search then starts without it
                self.log(f"[tune] warning: {name}: {measured}; the search starts without it")
                self.progress.add(name, TuneSpace.HAND, None)
                continue
            run_secs, args_info = measured
            self.database.commit_tuning_record(ms.database.TuningRecord(
                sch.trace, self.database.commit_workload(workload(self.kernels[name])), run_secs, self.target,
                args_info))
            self.progress.add(name, TuneSpace.HAND, 1e3 * min(run_secs))
            if sch is self.points[name][0]:
                self.default_ms[name] = 1e3 * min(run_secs)
        return batch

    def log_tasks(self, batch: list) -> None:
        for name in (t.name for t in self.tasks):
            first = sum(n == name for n, _ in batch)
            self.log(f"[tune] {name}: design spaces " + ", ".join(f"{s} {n}" for s, n in self.spaces[name].items())
                     + (f"; hand schedule {self.default_ms[name]:.4g} ms" if name in self.default_ms else "")
                     + (f"; {first} hand points measured first, best {self.progress.kernels[name].best_ms:.4g} ms"
                        if first else ""))

    def search(self) -> bool:
        """MetaSchedule's search, one kernel at a time over the trials left; whether Ctrl-C stopped it."""
        from tvm.s_tir import meta_schedule as ms

        callbacks = [*ms.measure_callback.MeasureCallback.create("default"), measure_callback(self.progress)]
        names = [t.name for t in self.tasks]
        for task, budget in zip(self.tasks, trial_budgets(names, self.default_ms,
                                                          self.options.trials - self.progress.done)):
            if not budget:
                continue
            if self.progress.spent():
                self._say_spent()
                break
            # one search per kernel: one kernel's failure in MetaSchedule must not end the others' search
            batch = min(budget, TRIALS_PER_BATCH)
            context = ms.TuneContext(fresh_copy(task.key), target=self.target, space_generator=task.generator,
                                     search_strategy=evolutionary_search(batch), task_name=task.name,
                                     rand_state=self.options.seed, num_threads=os.cpu_count() or 1,
                                     logger=logging.getLogger(_MS_LOGGER))
            try:
                ms.tune_tasks(tasks=[context], task_weights=[1.0], work_dir=str(self.out), max_trials_global=budget,
                              num_trials_per_iter=batch, builder=self.builder, runner=self.runner,
                              database=self.database, measure_callbacks=callbacks)
            except KeyboardInterrupt:
                self.log(f"[tune] interrupted: the {self.progress.done} trials measured are kept in {self.out}")
                return True
            except BudgetSpent:
                self._say_spent()
                break
            except (RuntimeError, ValueError, TypeError) as e:
                self.log(f"[tune] warning: {task.name}: MetaSchedule's search failed ({last_line(e)}); its "
                         "records so far are kept, and the other kernels go on")
        return False

    def _say_spent(self) -> None:
        self.log(f"[tune] the budget of {self.options.budget:g} s is spent after {self.progress.elapsed():.0f} s: "
                 f"the search stops; the {self.progress.done} trials measured are kept in {self.out}")

    def collect(self, interrupted: bool) -> TuneResult:
        """The best record of each kernel in the database (earlier runs' included)."""
        best = {}
        for name, func in self.kernels.items():
            key = workload(func)
            if self.database.has_workload(key):
                top = self.database.get_top_k(self.database.commit_workload(key), 1)
                if top and top[0].run_secs:
                    best[name] = 1e3 * min(float(s) for s in top[0].run_secs)
        measured = {name: dict(p.by_space) for name, p in self.progress.kernels.items()}
        return TuneResult(self.out, self.progress.done, self.progress.elapsed(), best, self.default_ms, self.spaces,
                          measured, interrupted, budget_spent=self.progress.spent())
