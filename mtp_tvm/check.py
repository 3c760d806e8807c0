"""``check``: build a case, run it on seeded inputs, and golden-check every stage output against torch."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from .cases import Case
from .compare import Comparison, check_logits_contract, ratio_allclose
from .compiler import CompiledCase, compile
from .config import Shapes
from .dumps import update_index
from .errors import UsageError
from .target import target_json
from .tensors import to_numpy

DEFAULT_TOLERANCE = {"atol": 1e-2, "rtol": 1e-2, "max_error_ratio": 0.02}
LOGITS = "candidate_logits"


@dataclasses.dataclass
class OutputCheck:
    """All comparator verdicts for one output; the first is the numeric comparison."""

    name: str
    checks: list[Comparison]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def as_dict(self) -> dict:
        main = self.checks[0].as_dict()
        return {**main, "passed": self.passed, "checks": [c.as_dict() for c in self.checks]}


@dataclasses.dataclass
class CheckResult:
    """What ``mtp-tvm check`` reports, and what ``--report`` writes as JSON."""

    case: str
    target: dict
    preset: str
    frontend: str
    seed: int
    shapes: dict
    outputs: dict[str, OutputCheck]
    build_seconds: float
    run_seconds: float
    dump_dir: str | None = None
    repro_dir: str | None = None  # written when a check fails
    gate: dict | None = None      # what --disable-pass / --bisect-limit did
    pass_records: list = dataclasses.field(default_factory=list, repr=False)  # with time_passes / dumps

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs.values())

    @property
    def failed_outputs(self) -> list[str]:
        return [name for name, o in self.outputs.items() if not o.passed]

    def as_dict(self) -> dict:
        return {"case": self.case, "target": self.target, "preset": self.preset, "frontend": self.frontend,
                "seed": self.seed, "shapes": self.shapes, "passed": self.passed,
                "build_seconds": self.build_seconds, "run_seconds": self.run_seconds, "dump_dir": self.dump_dir,
                "repro_dir": self.repro_dir, "gate": self.gate,
                "outputs": {k: v.as_dict() for k, v in self.outputs.items()}}

    def write_report(self, path: str | os.PathLike) -> None:
        """Write the JSON report atomically (a temp file renamed into place)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(self.as_dict(), indent=1))
            tmp.replace(path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise UsageError(f"cannot write report {path}: {e.strerror}") from None


def validate_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise UsageError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    return seed


def compare_outputs(case: Case, s: Shapes, actual: dict, expected: dict,
                    tolerance: dict | None = None) -> dict[str, OutputCheck]:
    """Every output through ``ratio_allclose``; the logits also through the logits contract."""
    cmp = ratio_allclose(**(tolerance or DEFAULT_TOLERANCE))
    results = {}
    for name in case.output_specs(s):
        checks = [cmp(actual[name], expected[name])]
        if name == LOGITS:
            checks.append(check_logits_contract(actual[name], s.batch, s.seq, s.vocab_shard, expected[name]))
        results[name] = OutputCheck(name, checks)
    return results


def golden_check(compiled: CompiledCase, seed: int, tolerance: dict | None = None,
                 golden: tuple[dict, dict] | None = None) -> tuple[CheckResult, dict, dict]:
    """Run a built case on the inputs drawn from ``seed`` and compare every output with its torch golden.
    Returns the result, the inputs and the expected outputs (``golden``: both, already computed)."""
    c, s = compiled.case, compiled.shapes
    inputs, expected = golden or seeded_golden(c, s, seed)
    t0 = time.perf_counter()
    actual = compiled.run({k: to_numpy(v) for k, v in inputs.items()})
    run_seconds = time.perf_counter() - t0
    result = CheckResult(c.name, target_json(compiled.target), s.preset.name, compiled.frontend, seed, s.as_dict(),
                         compare_outputs(c, s, actual, expected, tolerance), compiled.build_seconds, run_seconds,
                         str(compiled.dump_dir) if compiled.dump_dir else None, gate=compiled.gate,
                         pass_records=compiled.pass_records)
    return result, inputs, expected


def seeded_golden(case: Case, s: Shapes, seed: int) -> tuple[dict, dict]:
    """The seeded inputs and the torch golden of every stage."""
    inputs = case.make_inputs(s, validate_seed(seed))
    return inputs, case.golden(inputs, s)


def check(case: str = "tail", target="llvm", preset: str = "flash", frontend: str = "tir",
          tokens: int | None = None, vocab_shard: int | None = None, seed: int = 0,
          dump_passes: bool | str | os.PathLike | None = None, report: str | os.PathLike | None = None,
          tolerance: dict | None = None, log=print, **compile_options) -> CheckResult:
    """Build ``case``, run it on inputs drawn from ``seed``, and compare each stage with its torch golden.

    ``compile_options`` are ``compile()``'s debugging keywords (``only_changed``, ``dump_filter``,
    ``dump_func``, ``time_passes``, ``disable_passes``, ``bisect_limit``, ``extra_passes``). When the check
    fails, a reproducer is written to ``repro/`` in the run folder (a new one under ``dumps/`` when not
    dumping).
    """
    from .repro import write_repro

    seed = validate_seed(seed)
    compiled = compile(case=case, target=target, preset=preset, frontend=frontend, tokens=tokens,
                       vocab_shard=vocab_shard, dump_passes=dump_passes, **compile_options)
    log(f"[RUN] seed={seed}")
    result, inputs, expected = golden_check(compiled, seed, tolerance)
    if not result.passed:
        root = None if dump_passes in (None, False, True) else dump_passes
        result.repro_dir = str(write_repro(compiled, inputs, expected, seed, tolerance, result, root))
    if compiled.dump_dir is not None:
        repro = os.path.relpath(result.repro_dir, compiled.dump_dir) if result.repro_dir else None
        update_index(compiled.dump_dir, check={"passed": result.passed, "seed": seed,
                                               "failed_outputs": result.failed_outputs, "repro": repro})
    if report is not None:
        result.write_report(report)
    return result


def summary_table(r: CheckResult) -> str:
    """A fixed-width table: one row per comparator per output."""
    rows = [("output", "comparator", "mismatches", "max |diff|", "at", "result")]
    for o in r.outputs.values():
        for cmp in o.checks:
            rows.append((o.name, cmp.comparator.split("(")[0], f"{cmp.mismatches}/{cmp.numel}",
                         f"{cmp.max_abs_diff:.3g}", str(cmp.worst_index if cmp.worst_index is not None else "-"),
                         "PASS" if cmp.passed else "FAIL"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    head = (f"case={r.case} target={r.target['kind']} preset={r.preset} frontend={r.frontend} "
            f"T={r.shapes['tokens']} V={r.shapes['vocab_shard']} seed={r.seed} "
            f"build={r.build_seconds:.2f}s run={r.run_seconds * 1e3:.1f}ms")
    details = [f"{o.name} / {cmp.comparator}:\n  " + cmp.detail.replace("\n", "\n  ")
               for o in r.outputs.values() for cmp in o.checks if not cmp.passed]
    return "\n".join([head, *lines, *details, f"{'PASSED' if r.passed else 'FAILED'}"])
