"""What a golden check reports: per output, every comparator's verdict (``OutputCheck``); per run, the case, target,
shapes, timings and where its dumps and reproducer are (``CheckResult``, also written as the JSON report); and
the fixed-width table the CLI prints.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Protocol, runtime_checkable

from ..contract.cases import LM_HEAD_LOGITS
from ..support.atomic_file import write_user_file
from ..support.text_table import text_table
from ..verify.comparators import Comparison


@dataclasses.dataclass(frozen=True)
class OutputCheck:
    """All comparator verdicts for one output; the first is the numeric comparison."""

    name: str
    checks: tuple[Comparison, ...]

    def __post_init__(self):
        object.__setattr__(self, "checks", tuple(self.checks))

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def as_dict(self) -> dict:
        main = self.checks[0].as_dict()
        return {**main, "passed": self.passed, "checks": [c.as_dict() for c in self.checks]}


@runtime_checkable
class ProfileReport(Protocol):
    """What a check's kernel profile (``tools.measure.profile.Profile``, a layer above) offers its result: the JSON
    report's section and the table the CLI prints."""

    def as_dict(self) -> dict: ...

    def table(self) -> str: ...


@runtime_checkable
class NanReport(Protocol):
    """What ``--nan-check``'s finding (``tools.check.kernel_calls.NanOrigin``) offers: the report's section and the
    line the CLI prints."""

    def as_dict(self) -> dict: ...

    def describe(self, build: str = "") -> str: ...


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """What ``mtp-tvm check`` reports, and what ``--report`` writes as JSON; made whole once (the golden
    check's verdict, then ``dataclasses.replace`` with what the job added), never changed afterwards."""

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
    perturbation: dict | None = None  # a deliberate error injected into the device logits (``perturb_logit``)
    schedule: str = "default"
    repro_dir: str | None = None      # written when a check fails
    repro_error: str | None = None    # why the reproducer could not be written (a read-only folder, a full disk)
    gate: dict | None = None          # what --disable-pass / --bisect-limit did
    pass_records: list = dataclasses.field(default_factory=list, repr=False)  # with time_passes / dumps
    profile: ProfileReport | None = dataclasses.field(default=None, repr=False)  # --profile
    nan_origin: NanReport | None = None  # --nan-check: the first call with NaN/Inf
    nan_checked: bool = False
    kernel_repro_dir: str | None = None  # a failing check with dumps: the first differing kernel call's repro
    first_call_seconds: float = 0.0   # the first call (runtime load, JIT, weight packing), apart from run_seconds

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs.values())

    @property
    def failed_outputs(self) -> list[str]:
        return [name for name, o in self.outputs.items() if not o.passed]

    def as_dict(self) -> dict:
        return {"case": self.case, "target": self.target, "preset": self.preset, "frontend": self.frontend,
                "seed": self.seed, "shapes": self.shapes, "passed": self.passed,
                "build_seconds": self.build_seconds, "run_seconds": self.run_seconds,
                "first_call_seconds": self.first_call_seconds, "dump_dir": self.dump_dir,
                "schedule": self.schedule, "perturbation": self.perturbation, "repro_dir": self.repro_dir,
                "gate": self.gate,
                "outputs": {k: v.as_dict() for k, v in self.outputs.items()},
                **({"profile": self.profile.as_dict()} if self.profile is not None else {}),
                **({"nan_origin": self.nan_origin and self.nan_origin.as_dict()} if self.nan_checked else {}),
                **({"kernel_repro_dir": self.kernel_repro_dir} if self.kernel_repro_dir else {})}

    def __str__(self) -> str:
        """One line: what was checked and the verdict, each failing comparator with its worst point (the full
        table is ``summary_table``; the dataclass's own repr runs to pages)."""
        failed = [f"{o.name} {c.comparator.split('(')[0]} {c.mismatches}/{c.numel} mismatches, max |diff| "
                  f"{c.max_abs_diff:.3g}" + (f" at {c.worst_index}" if c.worst_index is not None else "")
                  for o in self.outputs.values() for c in o.checks if not c.passed]
        where = (f"{self.case} on {self.target['kind']}, preset {self.preset}, frontend {self.frontend}, "
                 f"schedule {self.schedule}, {sizes_text(self.shapes, vocab=False)}, seed {self.seed}")
        checks = sum(len(o.checks) for o in self.outputs.values())
        return (f"CheckResult({where}): " + (f"PASSED, {checks} checks" if self.passed else
                                             f"FAILED {len(failed)} of {checks} checks: " + "; ".join(failed))
                + (f"; reproducer {self.repro_dir}" if self.repro_dir else ""))

    __repr__ = __str__

    def write_report(self, path: str | os.PathLike) -> None:
        """Write the JSON report atomically (a temp file renamed into place)."""
        write_user_file(path, lambda p: p.write_text(json.dumps(self.as_dict(), indent=1)), what="report ")


def sizes_text(shapes: dict, vocab: bool = True) -> str:
    """A case's sizes (T, and V with ``vocab``); a user's module file's are its inputs' shapes (``shapes``:
    name -> shape)."""
    if "tokens" in shapes:
        return f"T={shapes['tokens']}" + (f" V={shapes['vocab_shard']}" if vocab else "")
    return "inputs=" + ",".join(f"{name}{list(shape)}".replace(" ", "") for name, shape in shapes.items())


def summary_table(r: CheckResult) -> str:
    """A fixed-width table: one row per comparator per output."""
    rows = [("output", "comparator", "mismatches", "max |diff|", "at", "result")]
    for o in r.outputs.values():
        for cmp in o.checks:
            rows.append((o.name, cmp.comparator.split("(")[0], f"{cmp.mismatches}/{cmp.numel}",
                         f"{cmp.max_abs_diff:.3g}", str(cmp.worst_index if cmp.worst_index is not None else "-"),
                         "PASS" if cmp.passed else "FAIL"))
    lines = text_table(rows)
    head = (f"case={r.case} target={r.target['kind']} preset={r.preset} frontend={r.frontend} schedule={r.schedule} "
            f"{sizes_text(r.shapes)} seed={r.seed} "
            f"build={r.build_seconds:.2f}s first-call={r.first_call_seconds * 1e3:.1f}ms "
            f"run={r.run_seconds * 1e3:.3g}ms")
    if LM_HEAD_LOGITS in r.outputs:
        head += f" owners={r.shapes['owners']} TP={r.shapes['tp']} VOCAB={r.shapes['tp'] * r.shapes['vocab_shard']}"
    details = [f"{o.name} / {cmp.comparator}:\n  " + cmp.detail.replace("\n", "\n  ")
               for o in r.outputs.values() for cmp in o.checks if not cmp.passed]
    return "\n".join([head, *lines, *details, f"{'PASSED' if r.passed else 'FAILED'}"])
