"""``localize``: which kernel call first computed something different. The case is built twice, the build under
test and a reference (``--against KEY=VALUE,...``), both run on the same seeded inputs, and every kernel call's
outputs are compared (``tools/check/kernel_calls.py`` records them). A module file is the same verb: with
``--against`` two builds of it on its example inputs, each output by its file's tolerance (``assert_close``);
without, its reference is eager torch op by op (``torch_reference.py``).

The reference is a clean baseline: it drops the test build's debugging changes (``--extra-passes``,
``--disable-pass``, ``--bisect-limit``) unless ``--against`` names them. Calls are aligned by kernel name and
order: names compared without what only renames a kernel (a dtype suffix, the ``_prepacked`` of weight packing,
TVM's numbering), and only calls with the same output shapes and dtypes partner; calls without a partner (other
kernels after a fusion, another frontend's) are listed. Each partnered output goes through ``ratio_allclose``
with the case's tolerance; the first call beyond it is named with its shapes, where its largest difference is,
and whether its inputs already differed, which separates "this kernel computes differently" from "it received
different inputs". Weights are main's arguments, in each build's own layout (packed or not): the same values.

Memory: with ``max_mb`` the calls are compared in windows of at most that many MB of kept tensors, oldest first,
each window one more run of both builds (the runs are deterministic); without it, all in one.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from collections.abc import Mapping

import numpy as np

from ...compiler.compiled import finish_run
from ...compiler.driver import CompiledCase
from ...compiler.module_build import CompiledModule
from ...compiler.options import BuildSpec, DebugOptions, ModuleSpec
from ...contract.cases import validate_seed
from ...instrument.run_folder import update_index
from ...ir.model import FRONTENDS
from ...passes.plugins import load_pass_plugin
from ...passes.target import require_runs_here
from ...schedule.files import kernel_of, validate_schedule
from ...support.atomic_file import write_user_file
from ...support.errors import UsageError
from ...support.text_table import text_table
from ...verify.comparators import Comparison, ratio_allclose
from ...verify.subject import CaseSubject, ModuleSubject, Subject, subject_for, subject_of
from ...verify.tolerances import ModuleTolerance, RatioTolerance, Tolerance
from .kernel_calls import PARAM, KernelCall, NanOrigin, nan_origin, record
from .kernel_repro import KERNEL_REPRO_DIR, write_kernel_repro
from .torch_reference import TorchLocalizeResult, compare_with_torch

AGAINST_KEYS = ("target", "frontend", "schedule", "disable-pass", "bisect-limit", "pass-plugin")


@dataclasses.dataclass(frozen=True)
class Against:
    """What the reference build changes: the build fields it sets, and its own debugging changes (none unless
    named)."""

    target: str | None = None
    frontend: str | None = None
    schedule: str | None = None
    disable_passes: tuple[str, ...] = ()
    bisect_limit: int | None = None
    pass_plugin: str | None = None

    @classmethod
    def parse(cls, text: str) -> Against:
        """``KEY=VALUE[,KEY=VALUE...]`` (``disable-pass`` may repeat; a target JSON may hold commas)."""
        fields: dict = {}
        items = [p for p in re.split(r",(?=\s*[a-z-]+=)", text or "") if p.strip()]
        if not items:
            raise UsageError(f"--against needs KEY=VALUE[,KEY=VALUE...] with KEY one of {', '.join(AGAINST_KEYS)}")
        for item in items:
            key, sep, value = (s.strip() for s in item.partition("="))
            if not sep or key not in AGAINST_KEYS or not value:
                close = difflib.get_close_matches(key, AGAINST_KEYS, n=1)
                raise UsageError(f"--against {item.strip()!r}: expected KEY=VALUE with KEY one of "
                                 f"{', '.join(AGAINST_KEYS)}" + (f" (did you mean {close[0]}?)" if close else ""))
            if key == "disable-pass":
                fields["disable_passes"] = fields.get("disable_passes", ()) + (value,)
            elif key == "bisect-limit":
                if not value.isdigit():
                    raise UsageError(f"--against bisect-limit={value}: must be an integer >= 0")
                fields["bisect_limit"] = int(value)
            elif key.replace("-", "_") in fields:
                raise UsageError(f"--against names {key} twice")
            else:
                fields[key.replace("-", "_")] = value
        return cls(**fields)

    def reference(self, subject: Subject) -> tuple[Subject, DebugOptions]:
        """The reference build: ``subject`` rebuilt with the fields named here, and only the debugging changes
        named here (a mistyped frontend, schedule, target or plugin is a one-line error before anything is
        built)."""
        if self.frontend is not None and isinstance(subject, ModuleSubject):
            raise UsageError(f"--against frontend={self.frontend}: a module file is imported one way; compare "
                             "another target, schedule or pass set")
        ref = dataclasses.replace(subject.spec, **{k: getattr(self, k) for k in ("target", "frontend", "schedule")
                                                   if getattr(self, k) is not None})
        if isinstance(subject, CaseSubject) and ref.frontend not in FRONTENDS:
            raise UsageError(f"--against frontend={ref.frontend}: choose one of {', '.join(FRONTENDS)}")
        try:
            validate_schedule(ref.schedule, ref.resolved_target)
            plugin = load_pass_plugin(self.pass_plugin) if self.pass_plugin else None
        except UsageError as e:
            raise UsageError(f"--against {self}: {e}") from None
        return subject.rebuilt(ref), DebugOptions(disable_passes=self.disable_passes, bisect_limit=self.bisect_limit,
                                                  extra_passes=plugin)

    def __str__(self) -> str:
        parts = [f"{k}={getattr(self, k)}" for k in ("target", "frontend", "schedule") if getattr(self, k)]
        parts += [f"disable-pass={n}" for n in self.disable_passes]
        parts += [f"bisect-limit={self.bisect_limit}"] if self.bisect_limit is not None else []
        parts += [f"pass-plugin={self.pass_plugin}"] if self.pass_plugin else []
        return ",".join(parts)


@dataclasses.dataclass(frozen=True)
class LocalizeOptions:
    """``against`` names the reference; ``seed`` the inputs; ``tolerance`` the ``ratio_allclose`` of every
    output (default the case's); ``max_mb`` bounds the tensors kept at once."""

    against: Against
    seed: int = 0
    tolerance: RatioTolerance = RatioTolerance()
    max_mb: float | None = None

    def __post_init__(self):
        validate_seed(self.seed)
        if self.max_mb is not None and not (isinstance(self.max_mb, (int, float)) and self.max_mb > 0):
            raise UsageError(f"--localize-max-mb must be a positive number, got {self.max_mb!r}")
        RatioTolerance.require(self.tolerance, "LocalizeOptions.tolerance")


def _same_kernel(name: str) -> str:
    """A kernel's name without what only renames it: the ``_prepacked`` of weight packing, a dtype suffix,
    TVM's numbering of duplicates (``unpad_rows1``)."""
    return re.sub(r"\d+$", "", kernel_of(name.removesuffix("_prepacked")))


@dataclasses.dataclass
class CallDiff:
    """One partnered pair of calls: per output its comparison, and its inputs' (None: not comparable)."""

    test: KernelCall
    reference: KernelCall
    outputs: list[Comparison] = dataclasses.field(default_factory=list)
    inputs: list[Comparison | str] = dataclasses.field(default_factory=list)  # str: why not compared by value

    @property
    def differs(self) -> bool:
        return any(not c.passed for c in self.outputs)

    @property
    def inputs_matched(self) -> bool:
        return all(isinstance(c, str) or c.passed for c in self.inputs)

    def as_dict(self) -> dict:
        return {"test": self.test.name, "reference": self.reference.name, "differs": self.differs,
                "outputs": [c.as_dict() for c in self.outputs],
                "inputs": [c if isinstance(c, str) else c.as_dict() for c in self.inputs]}


@dataclasses.dataclass(frozen=True)
class LocalizeResult:
    """Every partnered call's verdict, the calls without a partner, the first differing call, the first
    non-finite value of each build, and how the memory bound was met."""

    case: str
    test: str                      # how each build was made, for the report
    reference: str
    pairs: list[CallDiff]
    test_calls: list[KernelCall]
    reference_calls: list[KernelCall]
    unpartnered_test: list[KernelCall]
    unpartnered_reference: list[KernelCall]
    nan_test: NanOrigin | None
    nan_reference: NanOrigin | None
    windows: int
    max_mb: float | None
    kept_mb: float                 # the most tensor MB kept at once
    kernel_repro_dir: str | None = None
    kernel_repro_error: str | None = None
    dump_dir: str | None = None

    @property
    def first(self) -> CallDiff | None:
        return next((p for p in self.pairs if p.differs), None)

    @property
    def passed(self) -> bool:
        return self.first is None and self.nan_test is None

    def describe_first(self) -> str:
        p = self.first
        if p is None:
            return f"every partnered call is within tolerance ({len(self.pairs)} calls)"
        worst = max((c for c in p.outputs if not c.passed), key=lambda c: c.max_abs_diff)
        j = p.outputs.index(worst)
        at = worst.worst_index
        values = ""
        if at is not None and p.test.output_arrays is not None and at != ():
            t = float(p.test.output_arrays[j].astype(np.float32)[at])
            r = float(p.reference.output_arrays[j].astype(np.float32)[at])
            values = f": test {t:.6g}, reference {r:.6g}"
        outs = "; ".join(f"{list(s)} {d}" for s, d in p.test.outputs)
        lines = [f"FIRST DIFFERING CALL: {p.test.name} (reference {p.reference.name})",
                 f"  inputs:  {p.test.describe_inputs(self.test_calls)}",
                 f"  outputs: {outs}",
                 f"  largest |diff| {worst.max_abs_diff:.6g} in output {j} at {at}{values}; "
                 f"{worst.mismatches}/{worst.numel} beyond tolerance"]
        if p.inputs_matched:
            lines.append("  its inputs matched the reference's: this kernel computes differently")
        else:
            bad = [f"input {i} ({c.mismatches}/{c.numel}, max |diff| {c.max_abs_diff:.3g})"
                   for i, c in enumerate(p.inputs) if not isinstance(c, str) and not c.passed]
            lines.append(f"  its inputs already differed ({', '.join(bad)}): it received different inputs")
        return "\n".join(lines)

    def call_rows(self) -> list[dict]:
        """One row per partnered output, as the terminal table and the run page show them: ``result`` is
        ``FIRST`` for the first differing call's failing outputs, ``DIFF`` for later ones, else ``ok``."""
        first, rows = self.first, []
        for p in self.pairs:
            for j, c in enumerate(p.outputs):
                rows.append({"test": p.test.name if j == 0 else "", "reference": p.reference.name if j == 0 else "",
                             "kernel": p.test.kernel, "out": j, "shape": list(p.test.outputs[j][0]),
                             "max_abs_diff": c.max_abs_diff, "mismatches": c.mismatches, "numel": c.numel,
                             "inputs_matched": p.inputs_matched,
                             "result": "FIRST" if p is first and not c.passed else "ok" if c.passed else "DIFF"})
        return rows

    def page_section(self) -> dict:
        """What the run's ``index.html`` shows (``index.json``'s ``localize``): the per-call table, the calls
        without a partner, the first differing call and its reproducer (relative to the run folder)."""
        return {"test": self.test, "reference": self.reference, "passed": self.passed, "rows": self.call_rows(),
                "unpartnered_test": [c.name for c in self.unpartnered_test],
                "unpartnered_reference": [c.name for c in self.unpartnered_reference],
                "first": self.describe_first(), "kernel_repro": KERNEL_REPRO_DIR if self.kernel_repro_dir else None}

    def table(self) -> str:
        rows = [("test call", "reference call", "out", "shape", "max |diff|", "mismatches", "inputs", "result")]
        rows += [(r["test"], r["reference"], str(r["out"]), "x".join(map(str, r["shape"])), f"{r['max_abs_diff']:.3g}",
                  f"{r['mismatches']}/{r['numel']}", "same" if r["inputs_matched"] else "differ", r["result"])
                 for r in self.call_rows()]
        head = (f"localize {self.case}: test [{self.test}] against reference [{self.reference}]: "
                f"{len(self.test_calls)} and {len(self.reference_calls)} kernel calls, {len(self.pairs)} partnered")
        lines = [head, *text_table(rows, {4, 5})]
        for build, calls in (("test", self.unpartnered_test), ("reference", self.unpartnered_reference)):
            if calls:
                lines.append(f"no partner in the other build ({build}): {', '.join(c.name for c in calls)}")
        lines.append(self.describe_first())
        for build, origin in (("test", self.nan_test), ("reference", self.nan_reference)):
            lines.append(origin.describe(build) if origin else f"NaN/Inf: none in any {build} kernel call's output")
        bound = f" within --localize-max-mb {self.max_mb:g}" if self.max_mb is not None else ""
        lines.append(f"memory: compared in {self.windows} window(s){bound}, at most {self.kept_mb:.2f} MB of "
                     "tensors kept at once (each window one more run of both builds)")
        if self.kernel_repro_dir:
            lines.append(f"kernel reproducer: {self.kernel_repro_dir} (python {self.kernel_repro_dir}/repro.py)")
        elif self.kernel_repro_error:
            lines.append(f"kernel reproducer: not written: {self.kernel_repro_error}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        first = self.first
        return {"case": self.case, "test": self.test, "reference": self.reference, "passed": self.passed,
                "first": None if first is None else first.as_dict(),
                "first_inputs_matched": None if first is None else first.inputs_matched,
                "pairs": [p.as_dict() for p in self.pairs],
                "unpartnered_test": [c.name for c in self.unpartnered_test],
                "unpartnered_reference": [c.name for c in self.unpartnered_reference],
                "nan_test": self.nan_test and self.nan_test.as_dict(),
                "nan_reference": self.nan_reference and self.nan_reference.as_dict(),
                "windows": self.windows, "max_mb": self.max_mb, "kept_mb": self.kept_mb,
                "kernel_repro_dir": self.kernel_repro_dir}

    def write_json(self, path: str | os.PathLike) -> None:
        write_user_file(path, lambda p: p.write_text(json.dumps(self.as_dict(), indent=1)), what="localize report ")


def align(test: list[KernelCall], reference: list[KernelCall]) -> list[tuple[KernelCall, KernelCall]]:
    """Partners by kernel name (``_same_kernel``) and output shapes, in order (the longest common
    subsequences of the two call lists)."""
    def key(c: KernelCall):
        return _same_kernel(c.kernel), c.outputs

    matcher = difflib.SequenceMatcher(None, [key(c) for c in test], [key(c) for c in reference], autojunk=False)
    return [(test[a + k], reference[b + k]) for a, b, n in matcher.get_matching_blocks() for k in range(n)]


def _windows(pairs: list[tuple[KernelCall, KernelCall]], max_mb: float | None) -> list[list[int]]:
    """Consecutive groups of pair positions whose tensors fit in ``max_mb`` (a pair larger alone is its own)."""
    if max_mb is None:
        return [list(range(len(pairs)))] if pairs else []
    groups, size = [[]], 0
    for i, (t, r) in enumerate(pairs):
        need = t.nbytes + r.nbytes
        if groups[-1] and size + need > max_mb * 2**20:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += need
    return groups


def _compare_inputs(t: KernelCall, r: KernelCall, compare) -> list[Comparison | str]:
    if len(t.inputs) != len(r.inputs):
        return [f"not comparable: {len(t.inputs)} inputs against {len(r.inputs)}"]
    out = []
    for i, (ts, rs) in enumerate(zip(t.inputs, r.inputs)):
        if ts == rs:
            out.append(compare(t.input_arrays[i], r.input_arrays[i]))
        elif t.sources[i] == PARAM and r.sources[i] == PARAM:
            out.append(f"main's argument in each build's layout ({list(ts[0])} against {list(rs[0])})")
        else:
            out.append(f"not comparable: {list(ts[0])} {ts[1]} against {list(rs[0])} {rs[1]}")
    return out


def compare_builds(test, reference, options: LocalizeOptions, compare=None) -> LocalizeResult:
    """Run both builds (``CompiledCase`` or ``CompiledModule``) on their seeded (a module file: example) inputs
    and compare their kernel calls (see the module docstring) with ``compare`` (default ``ratio_allclose`` of the
    options' tolerance)."""
    inputs = test.make_inputs(seed=options.seed)
    compare = compare or ratio_allclose(options.tolerance)
    test_calls, ref_calls = record(test, inputs), record(reference, inputs)
    pairs = align(test_calls, ref_calls)
    diffs = [CallDiff(t, r) for t, r in pairs]
    windows = _windows(pairs, options.max_mb)
    kept = 0.0
    for group in windows:
        wanted_t = {pairs[i][0].index for i in group}
        wanted_r = {pairs[i][1].index for i in group}
        t_run = record(test, inputs, keep=wanted_t.__contains__)
        r_run = record(reference, inputs, keep=wanted_r.__contains__)
        kept = max(kept, sum(t_run[i - 1].nbytes for i in wanted_t) + sum(r_run[i - 1].nbytes for i in wanted_r))
        for i in group:
            d = diffs[i]
            t, r = t_run[d.test.index - 1], r_run[d.reference.index - 1]
            d.outputs = [compare(a, e) for a, e in zip(t.output_arrays, r.output_arrays)]
            d.inputs = _compare_inputs(t, r, compare)
            if d.differs and all(not x.differs for x in diffs[:i]):  # the first: its arrays stay for the report
                d.test, d.reference = t, r
    paired_t = {t.index for t, _ in pairs}
    paired_r = {r.index for _, r in pairs}
    return LocalizeResult(test.name, _describe(test), _describe(reference), diffs, test_calls, ref_calls,
                          [c for c in test_calls if c.index not in paired_t],
                          [c for c in ref_calls if c.index not in paired_r],
                          nan_origin(test_calls), nan_origin(ref_calls), len(windows), options.max_mb, kept / 2**20,
                          dump_dir=str(test.dump_dir) if test.dump_dir else None)


def _describe(c) -> str:
    debug = " ".join(c.debug.replace(dump_passes=None).as_argv())
    return f"frontend={c.frontend} schedule={c.schedule} target={c.target.kind.name}" + (f" {debug}" if debug else "")


def localize(spec: Subject | BuildSpec | ModuleSpec | str | os.PathLike | None = None,
             debug: DebugOptions | None = None, *, against: str | Against | None = None, seed: int = 0,
             tolerance: Tolerance | RatioTolerance | ModuleTolerance | Mapping | None = None,
             max_mb: float | None = None, kernel_repro: bool = True, log=print,
             **options) -> LocalizeResult | TorchLocalizeResult:
    """Build ``spec`` (a ``verify.subject.Subject``, or what makes one) with ``debug`` (keywords as for
    ``compile``) and the reference ``against`` names, compare every kernel call on the inputs of ``seed``, and for
    the first differing call write ``kernel_repro/`` (``tools/check/kernel_repro.py``) into the test build's run
    folder (a new one under ``dumps/`` when not dumping). A module file (its path, a ``ModuleSpec`` or ``module=``)
    runs on its example inputs, each output judged by ``tolerance`` as ``check`` judges the file's
    (``assert_close``); without ``against``, its reference is eager torch op by op, and the first op that differs
    is named with its source line."""
    subject, debug = subject_of(spec, debug, options, "localize")
    tolerance = subject.tolerance(tolerance)
    if isinstance(subject, ModuleSubject):
        if max_mb is not None:
            raise UsageError("--localize-max-mb applies to a case; a module file's calls are compared at its example "
                             "size in one run")
        if seed:
            raise UsageError("seed applies to a case; a module file's calls are compared on its example_inputs()")
        if against is None:
            require_runs_here(subject.spec.resolved_target)
            log(f"[BUILD] {subject.describe()}")
            compiled = subject.build(debug)
            log("[RUN] example inputs: every kernel call, and torch node by node")
            return compare_with_torch(compiled, tolerance)
    elif against is None:
        raise UsageError("localize of a case needs --against KEY=VALUE (the reference build, e.g. schedule=none)")
    against = against if isinstance(against, Against) else Against.parse(against)
    opts = LocalizeOptions(against, seed, _kernel_tolerance(tolerance), max_mb)
    reference_subject, ref_debug = against.reference(subject)
    require_runs_here(subject.spec.resolved_target)
    require_runs_here(reference_subject.spec.resolved_target)
    log(f"[BUILD] reference ({against}): {reference_subject.describe()}")
    reference = reference_subject.build(ref_debug)
    log(f"[BUILD] test: {subject.describe()}")
    test = subject.build(debug, open_run=True)  # its run folder (when dumping) gets the per-call table
    try:
        if isinstance(subject, CaseSubject) and reference.shapes != test.shapes:  # a module file: its examples
            raise UsageError("the reference build has other sizes than the build under test")
        log(f"[RUN] {f'seed={seed}' if isinstance(subject, CaseSubject) else 'example inputs'}: every kernel call "
            "of both builds")
        result = compare_builds(test, reference, opts, subject.comparison(tolerance))
        if kernel_repro:
            result = _with_kernel_repro(result, test, reference, opts, debug.dump_root)
        _show_in_run(test, result)
    finally:
        finish_run(test)
    return result


def _kernel_tolerance(tolerance: RatioTolerance | ModuleTolerance) -> RatioTolerance:
    """The ``ratio_allclose`` a kernel reproducer re-judges its call by: a case's own, the default for a module
    file (whose outputs ``assert_close`` judges)."""
    return tolerance if isinstance(tolerance, RatioTolerance) else RatioTolerance()


def _with_kernel_repro(result: LocalizeResult, test, reference, options: LocalizeOptions, root) -> LocalizeResult:
    """``result`` with ``kernel_repro/`` written for its first differing call (under ``root`` when the test build
    has no run folder), or why it could not be."""
    if result.first is None:
        return result
    try:
        return dataclasses.replace(result, kernel_repro_dir=str(write_kernel_repro(result, test, reference, options,
                                                                                   root)))
    except (UsageError, OSError) as e:
        return dataclasses.replace(result, kernel_repro_error=str(e) if isinstance(e, UsageError)
                                   else f"{e.strerror}: {e.filename}")


def _show_in_run(test: CompiledCase, result: LocalizeResult) -> None:
    """The per-call table into the test build's run page (``index.json``'s ``localize``), when it dumps."""
    if test.dump_dir is not None:
        update_index(test.dump_dir, localize=result.page_section())


def localize_failure(test: CompiledCase | CompiledModule, seed: int = 0,
                     tolerance: RatioTolerance | ModuleTolerance = RatioTolerance()) -> LocalizeResult:
    """What a failing ``check --dump-passes`` adds beside ``repro/``: the build it checked against a clean
    ``schedule=none`` build of the same case or module file, and ``kernel_repro/`` for the first differing call."""
    subject = subject_for(test)
    options = LocalizeOptions(Against(schedule="none"), seed, _kernel_tolerance(tolerance))
    reference_subject, ref_debug = options.against.reference(subject)
    reference = reference_subject.build(ref_debug)
    result = compare_builds(test, reference, options, subject.comparison(tolerance))
    if result.first is not None:
        result = dataclasses.replace(result, kernel_repro_dir=str(write_kernel_repro(result, test, reference,
                                                                                     options)))
    _show_in_run(test, result)
    return result
