"""``check``: build a case, run it on seeded inputs, and golden-check every stage output against torch."""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
import time
from pathlib import Path

from .atomic_file import write_user_file
from .cases import Case
from .compare import (Comparison, check_logits_contract, check_sampled_ids, device_hidden_logits_allclose,
                      logits_tolerance, ratio_allclose)
from .compiler import compile
from .config import Shapes
from .dumps import update_index
from .errors import UsageError
from .target import target_json
from .tensors import to_numpy
from .text_table import text_table

DEFAULT_TOLERANCE = {"atol": 1e-2, "rtol": 1e-2, "max_error_ratio": 0.02}
LOGITS = "candidate_logits"
LM_HEAD_LOGITS, SAMPLED_IDS = "logits", "sampled_ids"  # the TP-sharded LM head's outputs (spec §3)


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
    perturbation: dict | None = None  # a deliberate error injected into the device logits (``perturb_logit``)
    schedule: str = "default"
    repro_dir: str | None = None      # written when a check fails
    gate: dict | None = None          # what --disable-pass / --bisect-limit did
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
                "schedule": self.schedule, "perturbation": self.perturbation, "repro_dir": self.repro_dir,
                "gate": self.gate,
                "outputs": {k: v.as_dict() for k, v in self.outputs.items()}}

    def write_report(self, path: str | os.PathLike) -> None:
        """Write the JSON report atomically (a temp file renamed into place)."""
        write_user_file(path, lambda p: p.write_text(json.dumps(self.as_dict(), indent=1)), what="report ")


def validate_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise UsageError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    return seed


def _lm_head_logits_check(case: Case, s: Shapes, actual: dict, expected: dict, inputs: dict | None,
                          tolerance: dict | None) -> Comparison:
    """The conditional comparator, its reference projected from the hidden state the device's LM head read."""
    if inputs is None:
        raise UsageError(f"checking the LM-head logits of case {case.name!r} needs the case inputs")
    hidden = to_numpy(case.stage_input("lm_head", inputs, actual)).reshape(s.owners, -1, s.hidden)
    cmp = device_hidden_logits_allclose(s.tp, **logits_tolerance(tolerance))
    return cmp(actual[LM_HEAD_LOGITS], expected[LM_HEAD_LOGITS], hidden=hidden,
               lm_head_weight=inputs["lm_head_weight"], logit_row_indices=inputs["logit_row_indices"])


def compare_outputs(case: Case, s: Shapes, actual: dict, expected: dict, tolerance: dict | None = None,
                    inputs: dict | None = None, logits_tol: dict | None = None) -> dict[str, OutputCheck]:
    """Every output through ``ratio_allclose``; the local logits also through the logits contract; the LM
    head's logits through the device-hidden comparator (``logits_tol`` over ``DEFAULT_LOGITS_TOLERANCE``,
    needs ``inputs``) and its sampled ids against their argmax."""
    cmp = ratio_allclose(**(tolerance or DEFAULT_TOLERANCE))
    results = {}
    for name in case.output_specs(s):
        if name == LM_HEAD_LOGITS:
            checks = [_lm_head_logits_check(case, s, actual, expected, inputs, logits_tol)]
        elif name == SAMPLED_IDS:
            checks = [check_sampled_ids(actual[name], actual[LM_HEAD_LOGITS])]
        else:
            checks = [cmp(actual[name], expected[name])]
        if name == LOGITS:
            checks.append(check_logits_contract(actual[name], s.batch, s.seq, s.vocab_shard, expected[name]))
        results[name] = OutputCheck(name, checks)
    return results


def parse_logit_perturbation(text: str) -> tuple[int, int, int, float]:
    """``"OWNER,ROW,COL[,DELTA]"`` (DELTA default 1.0) -> a tuple for ``check(perturb_logit=...)``."""
    parts = [p.strip() for p in text.split(",")]
    try:
        if len(parts) not in (3, 4):
            raise ValueError
        return int(parts[0]), int(parts[1]), int(parts[2]), float(parts[3]) if len(parts) == 4 else 1.0
    except ValueError:
        raise UsageError(f"perturbation must be OWNER,ROW,COL[,DELTA] (integers, DELTA a number), got {text!r}"
                         ) from None


def _perturbation(where: tuple, shape: tuple) -> dict:
    """``(owner, row, col[, delta])`` checked against the logits shape -> ``{"index": [...], "delta": d}``."""
    in_range = all(isinstance(i, numbers.Integral) and 0 <= i < n for i, n in zip(where, shape))
    if len(where) not in (3, 4) or not in_range or not isinstance(where[3] if len(where) == 4 else 1.0, numbers.Real):
        raise UsageError(f"perturb_logit must be (owner, row, col[, delta]) inside logits {shape}, got {tuple(where)}")
    return {"index": [int(i) for i in where[:3]], "delta": float(where[3]) if len(where) == 4 else 1.0}


def check(case: str = "tail", target="llvm", preset: str = "flash", frontend: str = "tir",
          tokens: int | None = None, vocab_shard: int | None = None, seed: int = 0,
          dump_passes: bool | str | os.PathLike | None = None, report: str | os.PathLike | None = None,
          tolerance: dict | None = None, log=print, owners: int | None = None, tp: int | None = None,
          logits_tol: dict | None = None, perturb_logit: tuple | None = None, schedule: str = "default",
          **compile_options) -> CheckResult:
    """Build ``case`` with the named schedule, run it on inputs drawn from ``seed``, and compare each stage with
    its torch golden.

    For the LM-head cases: ``owners``/``tp`` size it, ``logits_tol`` overrides ``DEFAULT_LOGITS_TOLERANCE``
    (atol, rtol, max_error_ratio, max_e2e_abs_diff), ``perturb_logit=(owner, row, col[, delta])`` adds delta
    (default 1.0) to one device logit before the comparison.

    ``compile_options`` are ``compile()``'s debugging keywords (``only_changed``, ``dump_filter``,
    ``dump_func``, ``time_passes``, ``disable_passes``, ``bisect_limit``, ``extra_passes``). When the check
    fails (and no perturbation caused it), a reproducer is written to ``repro/`` in the run folder (a new one
    under ``dumps/`` when not dumping).
    """
    from .repro import write_repro

    seed = validate_seed(seed)
    if report is not None and not Path(report).resolve().parent.is_dir():  # fail before the build, not after
        raise UsageError(f"cannot write report {report}: {Path(report).parent} is not a directory")
    log(f"[BUILD] case={case} preset={preset} frontend={frontend} schedule={schedule}")
    compiled = compile(case=case, target=target, preset=preset, frontend=frontend, tokens=tokens,
                       vocab_shard=vocab_shard, dump_passes=dump_passes, owners=owners, tp=tp, schedule=schedule,
                       **compile_options)
    c, s = compiled.case, compiled.shapes
    if compiled.untuned:
        log(f"[tuned] no MetaSchedule record for {', '.join(compiled.untuned)}: their hand schedule is used")
    if (logits_tol is not None or perturb_logit is not None) and LM_HEAD_LOGITS not in c.output_specs(s):
        raise UsageError(f"LM-head logits options apply to cases with the lm_head stage; {c.name!r} has none")
    if logits_tol is not None:  # a bad option fails before the run, not after it
        device_hidden_logits_allclose(s.tp, **logits_tolerance(logits_tol))
    perturbation = None if perturb_logit is None else _perturbation(
        tuple(perturb_logit), c.output_specs(s)[LM_HEAD_LOGITS].shape)
    golden = seeded_golden(c, s, seed)
    result = golden_check(compiled.run, c, s, target_json(compiled.target), frontend, seed, compiled.build_seconds,
                          compiled.dump_dir, tolerance, log, logits_tol, perturbation, compiled.schedule, golden)
    result.gate, result.pass_records = compiled.gate, compiled.pass_records
    if not result.passed and perturbation is None:
        root = None if dump_passes in (None, False, True) else dump_passes
        result.repro_dir = str(write_repro(compiled, *golden, seed, tolerance, logits_tol, result, root))
    if compiled.dump_dir is not None:
        repro = os.path.relpath(result.repro_dir, compiled.dump_dir) if result.repro_dir else None
        update_index(compiled.dump_dir, check={"passed": result.passed, "seed": seed,
                                               "failed_outputs": result.failed_outputs, "repro": repro})
    if report is not None:
        result.write_report(report)
    return result


def golden_check(run, c: Case, s: Shapes, target: dict, frontend: str, seed: int, build_seconds: float,
                 dump_dir=None, tolerance: dict | None = None, log=print, logits_tol: dict | None = None,
                 perturbation: dict | None = None, schedule: str = "default",
                 golden: tuple[dict, dict] | None = None) -> CheckResult:
    """Run ``run`` (named inputs -> named outputs) on inputs drawn from ``seed`` and compare every stage output
    with its torch golden; shared by fresh builds and prebuilt artifacts. ``golden``: the seeded inputs and
    expected outputs, already computed (``seeded_golden``)."""
    seed = validate_seed(seed)
    log(f"[RUN] seed={seed}")
    inputs, expected = golden or seeded_golden(c, s, seed)
    t0 = time.perf_counter()
    actual = run({k: to_numpy(v) for k, v in inputs.items()})
    run_seconds = time.perf_counter() - t0
    if perturbation is not None:  # a debugging aid: one deliberately wrong device logit
        actual[LM_HEAD_LOGITS] = actual[LM_HEAD_LOGITS].copy()
        actual[LM_HEAD_LOGITS][tuple(perturbation["index"])] += perturbation["delta"]
        log(f"[PERTURB] logits{tuple(perturbation['index'])} += {perturbation['delta']}")
    return CheckResult(c.name, target, s.preset.name, frontend, seed, s.as_dict(),
                       compare_outputs(c, s, actual, expected, tolerance, inputs, logits_tol), build_seconds,
                       run_seconds, str(dump_dir) if dump_dir else None, perturbation, schedule)


def seeded_golden(case: Case, s: Shapes, seed: int) -> tuple[dict, dict]:
    """The inputs drawn from ``seed`` and every stage's torch golden."""
    inputs = case.make_inputs(s, validate_seed(seed))
    return inputs, case.golden(inputs, s)


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
            f"T={r.shapes['tokens']} V={r.shapes['vocab_shard']} seed={r.seed} "
            f"build={r.build_seconds:.2f}s run={r.run_seconds * 1e3:.1f}ms")
    if LM_HEAD_LOGITS in r.outputs:
        head += f" owners={r.shapes['owners']} TP={r.shapes['tp']} VOCAB={r.shapes['tp'] * r.shapes['vocab_shard']}"
    details = [f"{o.name} / {cmp.comparator}:\n  " + cmp.detail.replace("\n", "\n  ")
               for o in r.outputs.values() for cmp in o.checks if not cmp.passed]
    return "\n".join([head, *lines, *details, f"{'PASSED' if r.passed else 'FAILED'}"])
