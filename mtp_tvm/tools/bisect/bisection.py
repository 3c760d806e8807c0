"""Numeric bisect: name the first pass, or the first schedule step, after which the golden check fails.

**Passes** (``bisect_passes``): LLVM's ``-opt-bisect-limit`` driven by the golden check. A probe with limit L
builds with every optional pass numbered after L skipped (the required lowering still runs), runs the case on
the seeded inputs and compares with torch (a module file: on its example inputs, against its reference). The
candidates are the optional units (``pass_gate``) that changed the IR in the full build: one that changed nothing
cannot matter, since a probe gives it the very module it saw in the full build.

**Schedule steps** (``bisect_schedule``): the same search over the prefixes of an ``s_tir`` schedule trace,
replayed instruction by instruction on the function entering the ``schedule`` phase; the candidates are the
prefixes that change the function.

**Search.** Probe 0 (no candidate applied) must pass and the full build must fail; then some neighbouring
pair k-1 / k passes / fails. Binary search finds such a pair in log2(n) probes, and it is the *first* one when
failure is monotone: once the broken step is applied the output stays wrong (true unless a later step repairs
the damage). ``search="linear"`` probes every prefix in order and names the first failure for certain; binary
search falls back to it as soon as a probe gives no verdict (its build fails), because it can then no longer
tell which half holds the failure.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path

import tvm
import tvm_ffi
from tvm import s_tir
from tvm.s_tir.schedule import Trace

from ...compiler import driver
from ...compiler.options import BuildSpec, DebugOptions, Spec, split_options
from ...contract.cases import get_case
from ...passes.target import target_json
from ...schedule.bf16_dot import register_dot_intrinsics
from ...schedule.steps import fresh_copy
from ...support.errors import MtpError, UsageError, last_line
from ...verify.golden_check import GoldenOptions, Provenance, golden_check, seeded_golden
from ...verify.module_golden import golden_check_module, module_golden
from ...verify.subject import CaseSubject, Subject, subject_of
from ...verify.tolerances import ModuleTolerance, RatioTolerance, Tolerance
from .search import BisectSearch

SCHEDULE_PHASE = "schedule"
TRACE_PASS = "ApplyScheduleTrace"


class Verdict(StrEnum):
    """A probe's outcome; ``ERROR``: its build failed, so it has no golden-check verdict."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"


@dataclasses.dataclass
class Probe:
    """One build + golden check of a prefix: ``applied`` candidates of ``total``."""

    applied: int
    label: str
    verdict: Verdict
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class BisectResult:
    """What a bisect found. ``culprit`` is None when it could not name one; ``message`` says why."""

    kind: str                      # "pass" or "schedule step"
    culprit: dict | None
    message: str
    search: BisectSearch
    candidates: int
    probes: list[Probe]
    limits: tuple[int, int] | None = None  # pass bisect: (last passing, first failing) --bisect-limit
    dump_dir: str | None = None  # with dump_passes: the run folder of the first failing build, re-checked
    culprit_diff: str | None = None  # ... and the culprit's diff in it

    @property
    def found(self) -> bool:
        return self.culprit is not None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class Progress:
    """A progress bar on stderr: redrawn in place on a terminal, one line per probe otherwise."""

    def __init__(self, total: int, stream=None, width: int = 24):
        self.total, self.done, self.width = max(total, 1), 0, width
        self.stream = stream if stream is not None else sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()

    def step(self, probe: Probe) -> None:
        self.done += 1
        fill = min(self.width, round(self.width * self.done / self.total))
        bar = "#" * fill + "-" * (self.width - fill)
        line = (f"[bisect] [{bar}] probe {self.done}/~{self.total}: {probe.applied} applied ({probe.label}): "
                f"{probe.verdict.upper()}")
        self.stream.write(("\r\033[K" + line) if self.tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _search(total: int, probe: Callable[[int], Probe], search: BisectSearch,
            probes: list[Probe]) -> tuple[int | None, str]:
    """Given probe(0) passing and probe(total) failing, find k with probe(k-1) passing and probe(k) failing;
    returns k and how it was found."""
    lo, hi, how = 0, total, str(search)
    if search == BisectSearch.BINARY:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            verdict = probe(mid).verdict
            if verdict == Verdict.ERROR:
                break
            lo, hi = (mid, hi) if verdict == Verdict.PASS else (lo, mid)
        else:
            return hi, "binary (first failure if failure is monotone; --search linear checks every prefix)"
        how = "binary, then linear: a probe's build failed, so the halves could not be told apart"
    for k in range(lo + 1, hi):
        known = next((p for p in probes if p.applied == k), None)
        if (known or probe(k)).verdict == Verdict.FAIL:
            return k, how
    return hi, how


def _run_search(kind: str, labels: list[str], probe_fn: Callable[[int], tuple[Verdict, str]], full: Probe,
                search: BisectSearch, progress) -> tuple[int | None, str, list[Probe]]:
    """Probe 0, then search between it and the (already run) full build; returns (culprit position, message)."""
    total = len(labels)
    estimate = 1 + (math.ceil(math.log2(total)) if search == BisectSearch.BINARY and total > 1 else max(total - 1, 0))
    bar = Progress(estimate, progress)
    probes: list[Probe] = []

    def probe(k: int) -> Probe:
        if k == total:
            return full
        verdict, detail = probe_fn(k)
        p = Probe(k, labels[k - 1] if k else f"no {kind} applied", verdict, detail)
        probes.append(p)
        bar.step(p)
        return p

    try:
        first = probe(0)
        if first.verdict != Verdict.PASS:
            return None, (f"the golden check {'fails' if first.verdict == Verdict.FAIL else 'cannot build'} even with "
                          f"no candidate {kind} applied ({first.detail}): the cause is not one a bisect can "
                          f"skip"), [first, full]
        culprit, how = _search(total, probe, search, probes)
    finally:
        bar.close()
    return culprit, how, [*probes, full]


def _verdict(compiled_fn, golden, options: GoldenOptions) -> tuple[Verdict, str]:
    try:
        c = compiled_fn()
    except MtpError as e:
        return Verdict.ERROR, str(e)
    built = Provenance(target_json(c.target), c.frontend, c.schedule, c.build_seconds)
    result = golden_check(c.run, c.case, c.shapes, built, options, golden=golden, log=lambda *_: None)
    return (Verdict.PASS, "") if result.passed else (Verdict.FAIL, "fails: " + ", ".join(result.failed_outputs))


def _golden(spec: BuildSpec, seed: int) -> tuple[dict, dict]:
    """The seeded inputs and goldens, drawn once for every probe of a bisect."""
    return seeded_golden(get_case(spec.case), spec.shapes(), seed)


def bisect_passes(spec: Spec | Subject | str | os.PathLike | None = None, debug: DebugOptions | None = None, *,
                  seed: int = 0, tolerance: Tolerance | RatioTolerance | ModuleTolerance | Mapping | None = None,
                  search: BisectSearch | str = BisectSearch.BINARY, progress=None, **options) -> BisectResult:
    """Name the first optional pass after which the golden check fails (see the module docstring), of a case
    (``BuildSpec``: its seeded inputs of ``seed`` against torch) or of a module file (its path, a ``ModuleSpec``
    or ``module=``: its example inputs against its reference, computed once; ``tolerance`` a ``ModuleTolerance``)
    as ``check`` judges it (``tolerance``: as ``check``'s, a ``Tolerance`` for either). Keywords as for ``compile``."""
    subject, debug = subject_of(spec, debug, options, "bisect_passes")
    search = BisectSearch.parse(search, "search")
    if debug.bisect_limit is not None:
        raise UsageError("bisect chooses the bisect limit itself; drop it")

    def recheck(d: DebugOptions):
        from ..check.check import check

        return check(subject, d, seed=seed, tolerance=tolerance, log=lambda *_: None)

    if isinstance(subject, CaseSubject):
        options, golden = GoldenOptions.judging(seed, tolerance), _golden(subject.spec, seed)
        return _bisect_gate(subject.build, lambda build: _verdict(build, golden, options), debug, search, progress,
                            recheck)
    if seed:
        raise UsageError("a module file runs on its example_inputs(): seed does not apply to its bisect")
    tolerance, expected = subject.tolerance(tolerance), {}

    def verdict(build) -> tuple[Verdict, str]:
        try:
            c = build()
        except MtpError as e:
            return Verdict.ERROR, str(e)
        if not expected:
            expected.update(module_golden(c))
        result = golden_check_module(c, tolerance, lambda *_: None, expected)
        return (Verdict.PASS, "") if result.passed else (Verdict.FAIL, "fails: " + ", ".join(result.failed_outputs))

    return _bisect_gate(subject.build, verdict, debug, search, progress, recheck)


def _bisect_gate(build: Callable[[DebugOptions], object], verdict_of: Callable[[Callable], tuple[str, str]],
                 debug: DebugOptions, search: BisectSearch, progress,
                 recheck: Callable[[DebugOptions], object]) -> BisectResult:
    """The pass bisect of ``bisect_passes``: ``build(debug)`` makes a binary, ``verdict_of(lambda: binary)``
    judges it ("pass", "fail" or "error", and a detail). The probes never dump; with ``debug.dump_passes`` the
    first failing build is checked again by ``recheck(debug)`` with its dumps, and the result names its run
    folder and the culprit's diff there."""
    dumps, debug = debug.dump_passes, debug.replace(dump_passes=None)
    reference = build(debug.replace(time_passes=True))
    verdict, detail = verdict_of(lambda: reference)
    records = reference.pass_records
    openers = [r for r in records if r.optional and r.unit == r.index and r.skipped is None]
    changed = {r.unit for r in records if r.optional and r.changed}
    candidates = [r for r in openers if r.index in changed]
    labels = [r.label for r in candidates]
    full = Probe(len(candidates), labels[-1] if labels else "every pass", verdict, detail)
    if verdict != Verdict.FAIL:
        return BisectResult("pass", None, "the golden check passes with every pass applied: nothing to bisect"
                            if verdict == Verdict.PASS else f"the full build fails: {detail}", search, len(candidates),
                            [full])

    def probe_fn(k: int):
        limit = candidates[k - 1].index if k else 0
        return verdict_of(lambda: build(debug.replace(bisect_limit=limit)))

    culprit, how, probes = _run_search("pass", labels, probe_fn, full, search, progress)
    if culprit is None:
        return BisectResult("pass", None, how, search, len(candidates), probes)
    bad = candidates[culprit - 1]
    good = candidates[culprit - 2].index if culprit > 1 else 0
    dump_dir = diff = None
    if dumps:
        failing = recheck(debug.replace(dump_passes=dumps, bisect_limit=bad.index))
        dump_dir = failing.dump_dir
        diff = next((f"{dump_dir}/{p.diff}" for p in failing.pass_records if p.index == bad.index and p.diff), None)
    return BisectResult("pass", {"index": bad.index, "phase": bad.phase, "name": bad.name},
                        f"first failing pass: {bad.label} (--bisect-limit {good} passes, "
                        f"--bisect-limit {bad.index} fails)", how, len(candidates), probes, (good, bad.index),
                        dump_dir, diff)


# ---- schedule steps ----------------------------------------------------------------------------------------

def trace_pass(func: str, apply: Callable[[s_tir.Schedule], None], seen: dict | None = None) -> tvm.transform.Pass:
    """A pass that schedules PrimFunc ``func`` with ``apply(sch)`` (a trace, or a prefix of one) and marks it
    scheduled; ``seen["func"]`` receives the function as it arrived."""

    @tvm.transform.module_pass(opt_level=0, name=TRACE_PASS)
    def apply_trace(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        gv = next((gv for gv in mod.get_global_vars() if gv.name_hint == func), None)
        if gv is None:
            return mod
        if seen is not None:
            seen["func"] = fresh_copy(mod[gv])
        sch = s_tir.Schedule(tvm.IRModule({func: fresh_copy(mod[gv])}))
        register_dot_intrinsics()  # the trace may tensorize onto them
        apply(sch)
        out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
        out[gv] = sch.mod[func].with_attr("tirx.is_scheduled", True)
        return out

    return apply_trace


def as_apply(trace) -> Callable[[s_tir.Schedule], None]:
    """A trace as ``apply(sch)``: a ``Trace``, a ``Schedule`` (its trace), a callable, or the Python text of
    ``str(sch.trace)`` (``def apply_trace(sch): ...``), as a string or a file (a ``Path``)."""
    if isinstance(trace, os.PathLike):
        try:
            trace = Path(trace).read_text()
        except OSError as e:
            raise UsageError(f"cannot read schedule trace {trace}: {e.strerror}") from None
    if isinstance(trace, s_tir.Schedule):
        trace = trace.trace
    if isinstance(trace, (Trace, str)):
        register_dot_intrinsics(str(trace))  # the intrinsics it names, an AMX block's by its shape
    if isinstance(trace, Trace):
        return lambda sch: trace.apply_to_schedule(sch, remove_postproc=False)
    if isinstance(trace, str):
        namespace = {"s_tir": s_tir, "tvm": tvm, "T": tvm.script.tirx}
        try:
            exec(compile(trace, "<schedule trace>", "exec"), namespace)  # noqa: S102 - the user's own trace
        except Exception as e:
            raise UsageError(f"schedule trace does not run as Python: {type(e).__name__}: {e}") from None
        if not callable(namespace.get("apply_trace")):
            raise UsageError("schedule trace text defines no apply_trace(sch) function")
        return namespace["apply_trace"]
    if callable(trace):
        return trace
    raise UsageError(f"not a schedule trace: {type(trace).__name__}")


def _prefix(trace: Trace, steps: int) -> Callable[[s_tir.Schedule], None]:
    insts = list(trace.insts[:steps])
    decisions = {i: trace.decisions[i] for i in insts if i in trace.decisions}
    return lambda sch: Trace(insts, decisions).apply_to_schedule(sch, remove_postproc=False)


def bisect_schedule(func: str, trace, spec: BuildSpec | None = None, *, seed: int = 0,
                    tolerance: Tolerance | RatioTolerance | Mapping | None = None,
                    search: BisectSearch | str = BisectSearch.BINARY, progress=None,
                    **options) -> BisectResult:
    """Name the first step of ``trace`` (applied to PrimFunc ``func`` in the ``schedule`` phase) after which
    the golden check fails (see the module docstring). The function arrives unscheduled and leaves marked
    scheduled, so ``schedule`` applies to the other kernels only."""
    spec, _ = split_options(spec, None, options, "bisect_schedule")
    judging, search = GoldenOptions.judging(seed, tolerance), BisectSearch.parse(search, "search")
    apply = as_apply(trace)
    golden = _golden(spec, seed)
    seen: dict = {}
    try:
        reference = driver.compile(spec, extra_passes={SCHEDULE_PHASE: [trace_pass(func, apply, seen)]})
    except MtpError:
        if "func" not in seen:
            raise
        reference = None  # the full trace does not build: the search still runs, with this as the failing end
    if "func" not in seen:
        raise UsageError(f"no PrimFunc named {func!r} enters the schedule phase of case {spec.case!r} "
                         f"({spec.frontend} frontend)")
    sch = s_tir.Schedule(tvm.IRModule({func: fresh_copy(seen["func"])}))
    try:
        apply(sch)
    except (RuntimeError, ValueError, TypeError) as e:  # ScheduleError is a RuntimeError
        raise UsageError(f"the schedule trace does not apply to {func} as it enters the schedule phase: "
                         f"{last_line(e)}") from None
    full_trace = sch.trace
    lines = list(full_trace.as_python())
    insts = list(full_trace.insts)
    python = lines if len(lines) == len(insts) else [inst.kind.name for inst in insts]
    steps = []  # the prefixes (number of instructions) that change the function
    last = tvm_ffi.structural_hash(seen["func"])
    for k in range(1, len(insts) + 1):
        s = s_tir.Schedule(tvm.IRModule({func: fresh_copy(seen["func"])}))
        _prefix(full_trace, k)(s)
        h = tvm_ffi.structural_hash(s.mod[func])
        if h != last:
            steps.append(k)
        last = h
    labels = [f"step {k}: {python[k - 1].strip()}" for k in steps]

    def build_prefix(k: int):
        return driver.compile(spec, extra_passes={SCHEDULE_PHASE: [trace_pass(func, _prefix(full_trace, k))]})

    verdict, detail = (_verdict(lambda: reference, golden, judging) if reference is not None
                       else (Verdict.ERROR, "the full trace does not build"))
    full = Probe(len(steps), labels[-1] if labels else "whole trace", verdict, detail)
    if verdict != Verdict.FAIL:
        return BisectResult("schedule step", None, "the golden check passes with the whole trace applied: "
                            "nothing to bisect" if verdict == Verdict.PASS else detail, search, len(steps), [full])
    culprit, how, probes = _run_search(
        "schedule step", labels, lambda k: _verdict(lambda: build_prefix(steps[k - 1] if k else 0), golden,
                                                    judging), full, search, progress)
    if culprit is None:
        return BisectResult("schedule step", None, how, search, len(steps), probes)
    k = steps[culprit - 1]
    return BisectResult("schedule step", {"step": k, "kind": insts[k - 1].kind.name,
                                          "python": python[k - 1].strip(), "func": func},
                        f"first failing schedule step of {func}: {labels[culprit - 1]}", how, len(steps), probes)

