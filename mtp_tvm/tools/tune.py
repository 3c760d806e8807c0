"""``mtp-tvm tune``: schedule search with TVM's MetaSchedule; records persist under ``schedule.tuned.tuned_root()``
(``schedules/tuned/<target>/<case>/`` in a checkout), where ``--schedule tuned`` reads them back.

What this module adds to MetaSchedule, and why:

- ``case_kernels``: the PrimFuncs ``main`` calls, after legalisation, fusion and lifting parameter-only work
  (the Relax frontend's weight transposes) into ``main_transform_params``, each as its *tile workload* (every
  row count bound to the padded tile of 16: ``schedule.tuned``), so one tuned binary serves every T.
- ``Space``: ``hand`` (our rules as design spaces, ``schedule.space``), ``generic`` (MetaSchedule's own rules:
  multi-level tiling and friends) or ``both``; the log says how many design spaces and measured candidates
  each produced. The hand space's structural points (``hand_points``, the shipped knobs first) are measured in
  one build batch before the search and committed, so the best record is never slower than the hand schedule
  and every structure is tried once.
- ``load_tensor_intrinsics``: ``TuneContext`` imports every tensor intrinsic TVM ships, and the CUDA ones alone
  take ~30-60 s on this machine; we import the package shell plus the target's own intrinsics (x86 or CUDA).
- ``fast_build``: MetaSchedule's default builder re-does that import in each fresh worker, so every candidate
  timed out at 30 s (cookbook §5.1); ours builds candidates in parallel workers without it.
- ``ProgressCallback``: trials done of planned, best ms per kernel and per space, and the time left.
  ``Ctrl-C`` stops the search and keeps every measured record (the JSON database is appended per trial).
- RPC: ``rpc=("host:port", key)`` measures on servers registered with a TVM RPC tracker (``RPCRunner``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import socket
import struct
import sys
import time
import types
from pathlib import Path
from typing import Callable, Literal

import tvm
from tvm import relax, tirx
from tvm.target import Target

from ..compiler.options import BuildSpec
from ..compiler.runtime import threads_wanted
from ..passes.target import cpu_isa, is_gpu
from ..schedule.bf16_dot import register_dot_intrinsics
from ..schedule.space import HAND, default_schedule, hand_points, hand_space, is_hand
from ..schedule.steps import fresh_copy
from ..schedule.tuned import (
    RECORDS_FILE,
    called_kernels,
    check_database,
    describe_identity,
    target_identity,
    tile_workload,
    tuned_dir,
    workload,
)
from ..support.errors import BuildError, UsageError, last_line
from ..support.folder_lock import folder_lock

Space = Literal["hand", "generic", "both"]
SPACES = ("hand", "generic", "both")
GENERIC = "generic"

_BUILD = BuildSpec()  # the defaults every command shares
_INTRINSICS = "tvm.s_tir.tensor_intrin"


_MS_LOGGER = "tvm.s_tir.meta_schedule"  # its console handler prints at this logger's level


def load_tensor_intrinsics(target: Target) -> None:
    """Register only ``target``'s tensor intrinsics, and make ``import tvm.s_tir.tensor_intrin`` a no-op."""
    if _INTRINSICS not in sys.modules:
        spec = importlib.util.find_spec(_INTRINSICS)
        shell = types.ModuleType(_INTRINSICS)
        shell.__path__ = list(spec.submodule_search_locations)
        shell.__package__ = _INTRINSICS
        sys.modules[_INTRINSICS] = shell
    importlib.import_module(f"{_INTRINSICS}.{'cuda' if is_gpu(target) else 'x86'}")


def fast_build(mod: tvm.IRModule, target: Target, _params):
    """MetaSchedule builder function: a plain ``tvm.compile`` (no tensor-intrinsic import in the worker)."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm.compile(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target,
                       tir_pipeline="s_tir").mod  # as our builds lower (it links imported LLVM IR)


def case_kernels(case: str, target: Target, preset: str, frontend: str,
                 vocab_shard: int | None) -> dict[str, tirx.PrimFunc]:
    """The kernels ``main`` calls per call (parameter-only work lifted out), as tile workloads, by name."""
    from ..ir.model import build_relax_module
    from ..spec.cases import get_case
    from ..spec.presets import make_shapes

    return relax_kernels(build_relax_module(get_case(case), make_shapes(preset, None, vocab_shard), frontend), target)


def relax_kernels(mod: tvm.IRModule, target: Target) -> dict[str, tirx.PrimFunc]:
    """The kernels of a Relax module's ``main`` per call (parameter-only work lifted out), as tile workloads, by
    name: a case's (``case_kernels``) or a user's module file's."""
    from ..passes.pipeline import fuse_passes, legalize_passes
    from ..schedule.apply import ApplySchedules

    with target:
        mod = tvm.transform.Sequential(legalize_passes(target) + fuse_passes(target)
                                       + [relax.transform.LiftTransformParams()])(mod)
    rows = ApplySchedules(target).tuned_rows  # each GEMM's rows as a tuned build cuts them
    return {gv.name_hint: tile_workload(rows(gv.name_hint, mod[gv])) for gv in called_kernels(mod)}


@dataclasses.dataclass
class KernelProgress:
    trials: int = 0
    best_ms: float = float("inf")
    by_space: dict[str, int] = dataclasses.field(default_factory=dict)  # measured candidates per space
    best_by_space: dict[str, float] = dataclasses.field(default_factory=dict)


def candidate_space(sch) -> str:
    """Which design space a measured candidate came from (our hand spaces mark their traces: ``is_hand``)."""
    return HAND if is_hand(sch) else GENERIC


class ProgressCallback:
    """A ``PyMeasureCallback`` body: after every measured batch, trials done of planned, best latency of the
    kernel overall and per space, and the time left at the rate so far."""

    def __init__(self, total: int, log: Callable[[str], None]):
        self.total, self.log = total, log
        self.kernels: dict[str, KernelProgress] = {}
        self.start = time.perf_counter()

    @property
    def done(self) -> int:
        return sum(k.trials for k in self.kernels.values())

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        if not runner_results:  # a task whose space is exhausted still gets scheduled: nothing new to say
            return
        name = task_scheduler.tasks_[task_id].ctx.task_name
        for cand, res in zip(measure_candidates, runner_results):
            ok = res.run_secs and not res.error_msg
            self.add(name, candidate_space(cand.sch), 1e3 * sum(map(float, res.run_secs)) / len(res.run_secs)
                     if ok else None)
        self.say(name)

    def add(self, name: str, space: str, ms: float | None) -> None:
        """One trial of kernel ``name`` from ``space``: its milliseconds, or None when it failed."""
        prog = self.kernels.setdefault(name, KernelProgress())
        prog.trials += 1
        prog.by_space[space] = prog.by_space.get(space, 0) + 1
        if ms is not None:
            prog.best_ms = min(prog.best_ms, ms)
            prog.best_by_space[space] = min(prog.best_by_space.get(space, float("inf")), ms)

    def say(self, name: str) -> None:
        prog = self.kernels[name]
        elapsed = time.perf_counter() - self.start
        left = elapsed / self.done * max(self.total - self.done, 0)
        spaces = ", ".join(f"{s} {n} (best {prog.best_by_space.get(s, float('inf')):.4g} ms)"
                           for s, n in sorted(prog.by_space.items()))
        self.log(f"[tune] {self.done}/{self.total} trials, {elapsed:.0f}s, ~{left:.0f}s left | {name}: "
                 f"{prog.trials} trials, best {prog.best_ms:.4g} ms; {spaces}")


@dataclasses.dataclass
class TuneResult:
    work_dir: Path
    trials: int  # measured in this run (the hand points measured before the search included)
    seconds: float
    best_ms: dict[str, float]  # kernel -> best measured latency over all records in the database
    default_ms: dict[str, float]  # kernel -> its hand schedule's shipped knobs, as measured by the tuner
    spaces: dict[str, dict[str, int]]  # kernel -> space -> design spaces it generated
    measured: dict[str, dict[str, int]]  # kernel -> space -> candidates measured in this run
    interrupted: bool = False

    @property
    def seconds_per_trial(self) -> float:
        return self.seconds / self.trials if self.trials else float("nan")


TRACKER_TIMEOUT_S = 10  # connecting to the tracker and hearing its summary; MetaSchedule would retry forever


def parse_tracker(address: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); anything else is a one-line ``UsageError``."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--rpc-tracker must be HOST:PORT, got {address!r}")
    return host, int(port)


def require_tracker(host: str, port: int, key: str, timeout: float = TRACKER_TIMEOUT_S) -> None:
    """Before tuning: the tracker answers within ``timeout`` seconds and has a server for ``key``. Otherwise
    MetaSchedule retries every 5 s forever (nothing listening) or records every trial as failed (``best inf``)."""
    from tvm.rpc import base

    where = f"RPC tracker {host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            if struct.unpack("<i", base.recvall(sock, 4))[0] != base.RPC_TRACKER_MAGIC:
                raise UsageError(f"{host}:{port} is not a TVM RPC tracker (it answered, but not the tracker magic)")
            base.sendjson(sock, [base.TrackerCode.SUMMARY])
            reply = base.recvjson(sock)
    except UsageError:
        raise
    except (OSError, ValueError, struct.error) as e:  # refused, unreachable, unknown host, timed out, garbage
        raise UsageError(f"cannot reach the {where} within {timeout:g} s: {getattr(e, 'strerror', None) or e}"
                         ) from None
    summary = reply[1] if isinstance(reply, list) and len(reply) == 2 and isinstance(reply[1], dict) else {}
    if key not in summary.get("queue_info", {}):
        raise UsageError(f"the {where} has no server registered with key {key!r} (registered: "
                         f"{', '.join(sorted(summary.get('queue_info', {}))) or 'none'})")


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


def _spaces(space: Space, hand, target: Target, key: tvm.IRModule, fuse_consumers: bool = True):
    """The space generators of the kernel ``key``: ``hand`` is its hand space's ``ScheduleFn`` body, or None. The
    generic space is MetaSchedule's ``PostOrderApply`` with the target's rules; ``fuse_consumers=False`` (CPU) swaps its
    multi-level tiling for one without the write cache that computes the consumer inside the tile: where the
    consumer reads two GEMMs (``w8a8_dual_gemm``'s epilogue) that fusion fails ("requires all the producer(s)
    of the given block to be present under the target loop") and takes the whole space with it."""
    from tvm.s_tir import meta_schedule as ms

    chosen = {}
    if space in ("hand", "both") and hand is not None:
        chosen[HAND] = ms.space_generator.ScheduleFn(hand)
    if space in ("generic", "both"):
        chosen[GENERIC] = ms.space_generator.PostOrderApply()
        if not fuse_consumers:
            rules = ms.TuneContext(fresh_copy(key), target=target,
                                   space_generator=chosen[GENERIC]).space_generator.sch_rules
            tiling = ms.schedule_rule.MultiLevelTiling  # the LLVM default's structure and innermost limit:
            chosen[GENERIC] = ms.space_generator.PostOrderApply(sch_rules=[
                tiling(structure="SSRSRS", max_innermost_factor=64) if type(r) is tiling else r for r in rules])
    return chosen


def _count_spaces(generator, key: tvm.IRModule, target: Target, name: str, seed: int) -> int:
    """How many design spaces ``generator`` makes for the workload ``key``: in a context of its own, on a copy
    (space generation edits IR nodes in place, and the committed records must replay on the workload as it was)."""
    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(fresh_copy(key), target=target, space_generator=generator, task_name=name, rand_state=seed)
    return len(ctx.generate_design_space())


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


def first_points(points: dict[str, list], trials: int) -> list[tuple[str, object]]:
    """The hand points to measure before the search, at most ``trials``: every kernel's shipped point (its
    first) before any kernel's other structures, so a small budget still measures each hand schedule."""
    rounds = max((len(p) for p in points.values()), default=0)
    ordered = [(name, p[i]) for i in range(rounds) for name, p in points.items() if i < len(p)]
    return ordered[:trials]


def _measure(schedules: list, target: Target, builder, runner) -> list[tuple[list[float], list] | BuildError]:
    """Schedules built and timed by the tuner's own builder and runner, all in one batch (the builder starts a
    pool of worker processes per call): per schedule, (seconds per run, the arguments' info its record needs), or
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


def tune(case: str = _BUILD.case, target=_BUILD.target, preset: str = _BUILD.preset, frontend: str = _BUILD.frontend,
         trials: int = 16,
         vocab_shard: int | None = None, work_dir: str | os.PathLike | None = None, seed: int = 0,
         rpc: tuple[str, str] | None = None, space: Space = "both",
         log: Callable[[str], None] = print, module: str | os.PathLike | None = None) -> TuneResult:
    """Tune ``case``'s kernels (or, with ``module``, those of that module file: ``--module``) for ``trials``
    trials in all, in ``space``; warm-starts from the database in ``work_dir``. The hand schedule of a kernel
    without records is measured and committed first."""
    from ..passes.target import resolve_target

    if module is not None:
        from ..ir.user_module import load_user_module

        user = load_user_module(module)
        case, kernels_of = user.name, lambda tgt: relax_kernels(user.mod, tgt)
    else:
        kernels_of = lambda tgt: case_kernels(case, tgt, preset, frontend, vocab_shard)  # noqa: E731

    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise UsageError(f"trials must be a positive integer, got {trials!r}")
    if space not in SPACES:
        raise UsageError(f"space must be one of {', '.join(SPACES)}, got {space!r}")
    tgt = resolve_target(target)
    if tgt.kind.name == "llvm" and "num-cores" not in tgt.export():
        raise UsageError("MetaSchedule needs the llvm target's num-cores; use --target llvm or set it in the JSON")
    runner = _runner(rpc)  # an unreachable tracker fails here, in seconds, before anything is built
    out = Path(work_dir) if work_dir is not None else tuned_dir(tgt, case)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot use {out} as the tuning work dir: {e.strerror}") from None
    # MetaSchedule numbers workloads in memory and appends: two writers of one folder corrupt it
    with folder_lock(out, True, f"another `mtp-tvm tune` is writing {out}; wait for it to finish or pass "
                                "another --work-dir"):
        check_database(out)
        _require_one_target(out, tgt)
        return _search(tgt, kernels_of, trials, out, seed, runner, space, log)


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


def _search(tgt: Target, kernels_of: Callable[[Target], dict], trials: int, out: Path, seed: int, runner,
            space: Space, log: Callable[[str], None]) -> TuneResult:
    """The search of ``tune`` over the kernels ``kernels_of(tgt)``, holding ``out``'s lock."""
    from tvm.s_tir import meta_schedule as ms

    from ..passes.pipeline import register_with_tvm
    from ..schedule.apply import ApplySchedules

    register_with_tvm()  # Ctrl-C inside MetaSchedule's C++ loop comes back as KeyboardInterrupt
    kernels = kernels_of(tgt)
    load_tensor_intrinsics(tgt)
    logging.getLogger(_MS_LOGGER).setLevel(logging.WARNING)  # full logs still go to <work_dir>/logs
    isa = None if is_gpu(tgt) else cpu_isa(tgt)
    hand_schedules = ApplySchedules(tgt)
    builder = ms.builder.LocalBuilder(f_build=fast_build, timeout_sec=120)
    register_dot_intrinsics()  # the database parses the records of a previous run as it loads
    database = ms.database.JSONDatabase(work_dir=str(out))
    tasks, default_ms, spaces, points = [], {}, {}, {}
    for name, func in kernels.items():
        key = workload(func)
        ks = hand_schedules.hand_schedule(name, func)
        hand = hand_space(ks, isa) if ks is not None else None
        if not _spaces(space, hand, tgt, key):
            log(f"[tune] {name}: no hand schedule, so nothing to tune in the hand space (try --space both)")
            continue
        spaces[name], fuse = {}, True
        for s in _spaces(space, hand, tgt, key):
            # counted with generators of their own (rules keep state); a CPU generic space that fails with
            # consumer fusion is counted again without it (``_spaces``)
            tries, errors = ((True, False) if s == GENERIC and not is_gpu(tgt) else (True,)), []
            for fusion in tries:
                try:
                    spaces[name][s] = _count_spaces(_spaces(space, hand, tgt, key, fusion)[s], key, tgt, name, seed)
                except (RuntimeError, ValueError, TypeError) as e:  # TVM's rules can fail on a kernel: say so
                    errors.append(e)
                    continue
                fuse = fuse and fusion
                break
            if s not in spaces[name]:
                log(f"[tune] warning: {name}: the {s} space fails on this kernel ({last_line(errors[-1])}); "
                    "tuning it without")
            elif errors:
                log(f"[tune] {name}: the generic space fails with consumer fusion ({last_line(errors[0])}); "
                    "its multi-level tiling runs without it")
        generators = [g for s, g in _spaces(space, hand, tgt, key, fuse).items() if s in spaces[name]]
        if not generators:
            continue
        if ks is not None and not database.has_workload(key):  # the shipped knobs, then the other structures
            points[name] = hand_points(key, ks, isa) if HAND in spaces[name] else [default_schedule(key, ks, isa)]
        generator = generators[0] if len(generators) == 1 else ms.space_generator.SpaceGeneratorUnion(generators)
        tasks.append(ms.TuneContext(fresh_copy(key), target=tgt, space_generator=generator,
                                    search_strategy=ms.search_strategy.EvolutionarySearch(), task_name=name,
                                    rand_state=seed, num_threads=os.cpu_count() or 1,
                                    logger=logging.getLogger(_MS_LOGGER)))
    progress = ProgressCallback(trials, log)
    batch = first_points(points, trials)  # the hand points count as trials
    for (name, sch), measured in zip(batch, _measure([sch for _, sch in batch], tgt, builder, runner)):
        if isinstance(measured, BuildError):  # said, not hidden: the search then starts without it
            log(f"[tune] warning: {name}: {measured}; the search starts without it")
            progress.add(name, HAND, None)
            continue
        run_secs, args_info = measured
        database.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, database.commit_workload(workload(kernels[name])), run_secs, tgt, args_info))
        progress.add(name, HAND, 1e3 * min(run_secs))
        if sch is points[name][0]:
            default_ms[name] = 1e3 * min(run_secs)
    for name in (t.task_name for t in tasks):
        first = sum(n == name for n, _ in batch)
        log(f"[tune] {name}: design spaces " + ", ".join(f"{s} {n}" for s, n in spaces[name].items())
            + (f"; hand schedule {default_ms[name]:.4g} ms" if name in default_ms else "")
            + (f"; {first} hand points measured first, best {progress.kernels[name].best_ms:.4g} ms" if first else ""))
    callbacks = [*ms.measure_callback.MeasureCallback.create("default"), _py_callback(progress)]
    interrupted = False
    for task, budget in zip(tasks, trial_budgets([t.task_name for t in tasks], default_ms, trials - progress.done)):
        if not budget:
            continue
        # one search per kernel: one kernel's failure in MetaSchedule must not end the others' search
        try:
            ms.tune_tasks(tasks=[task], task_weights=[1.0], work_dir=str(out), max_trials_global=budget,
                          num_trials_per_iter=min(budget, 16), builder=builder, runner=runner, database=database,
                          measure_callbacks=callbacks)
        except KeyboardInterrupt:
            interrupted = True
            log(f"[tune] interrupted: the {progress.done} trials measured are kept in {out}")
            break
        except (RuntimeError, ValueError, TypeError) as e:
            log(f"[tune] warning: {task.task_name}: MetaSchedule's search failed ({last_line(e)}); its records so "
                "far are kept, and the other kernels go on")
    seconds = time.perf_counter() - progress.start
    best = {}
    for name, func in kernels.items():
        key = workload(func)
        if database.has_workload(key):
            top = database.get_top_k(database.commit_workload(key), 1)
            if top and top[0].run_secs:
                best[name] = 1e3 * min(float(s) for s in top[0].run_secs)
    measured = {name: dict(p.by_space) for name, p in progress.kernels.items()}
    return TuneResult(out, progress.done, seconds, best, default_ms, spaces, measured, interrupted)


def _py_callback(progress: ProgressCallback):
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class _Progress(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            progress.apply(task_scheduler, task_id, measure_candidates, builder_results, runner_results)

    return _Progress()
