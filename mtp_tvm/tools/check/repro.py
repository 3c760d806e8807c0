"""Reproducers: when a golden check fails, ``repro/`` in the run folder holds everything to rebuild and re-check
the failing module on its own, without the case machinery, the original command or its pass plugin:

    module.py      the failing module as TVMScript: the case's module after the optimizing phases (legalize,
                   fuse, schedule and any user passes), i.e. exactly what the lowering phases were given
    inputs.npz     the seeded inputs (``write_npz``: what ``mtp-tvm run`` reads; repro.json has the dtypes)
    expected.npz   the torch goldens
    target.json    the target
    command.txt    the exact command that failed
    repro.json     case, shapes, seed, tolerance, and the pass gate of the lowering phases
    repro.py       rebuilds module.py from the ``lower-dataflow`` phase on, runs it and compares; exits 1 when
                   the failure reproduces, 0 when it does not, 2 when the folder is broken (a missing or
                   damaged file: never read as either)

The folder appears atomically (written under a unique temporary name, then renamed).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import time
from collections.abc import Callable
from pathlib import Path

import tvm

from ...compiler.arrays import dtype_name, read_npz, to_numpy, write_npz
from ...instrument.run_folder import mark_complete, new_run_dir
from ...passes.pipeline import FIRST_LOWERING_PHASE, OPTIMIZING_PHASES
from ...passes.plugins import extra_pass_names, resolve_extra_passes
from ...passes.target import resolve_target, target_json
from ...support.atomic_file import make_temp_dir, remove_own_temps, temp_prefix
from ...support.errors import MtpError, last_line
from ...verify.golden_check import GoldenOptions, Provenance, golden_check
from ...verify.tolerances import LogitsTolerance, RatioTolerance, Tolerance

REPRO_DIR = "repro"
PROJECT_ROOT = Path(__file__).resolve().parents[3]  # the folder holding the mtp_tvm package

_LAUNCHER = '''"""{doc}"""
import sys
from pathlib import Path

if Path({root!r}, "mtp_tvm").is_dir():  # the mtp_tvm that wrote this reproducer
    sys.path.insert(0, {root!r})
try:
    from {module} import rerun
except ImportError as e:
    print(f"repro: error: cannot import mtp_tvm ({{e}}); install it or run from its checkout", file=sys.stderr)
    sys.exit(2)

sys.exit(rerun(Path(__file__).resolve().parent))
'''


def launcher(module: str, doc: str) -> str:
    """A reproducer's ``repro.py``: calls ``rerun(its folder)`` of ``module``, from the checkout that wrote it
    when that is still there; exit 2 when mtp_tvm cannot be imported."""
    return _LAUNCHER.format(root=str(PROJECT_ROOT), module=module, doc=doc)


def write_folder(run: Path, name: str, fill) -> Path:
    """``fill(folder)`` a temporary folder in ``run``, then rename it to ``run/name``: the folder appears whole
    or not at all (a name of its own per writer), readable as any folder ``mkdir`` makes."""
    final = run / name
    prefix = temp_prefix(final)
    try:
        tmp = make_temp_dir(prefix, run)  # mkdir's mode, not mkdtemp's 0700
        fill(tmp)
        tmp.replace(final)
    finally:
        remove_own_temps(prefix, run)  # by name: an interrupt may land inside make_temp_dir
    return final


def save_arrays(path: Path, arrays: dict) -> dict[str, str]:
    """``write_npz`` of the arrays (BF16 as ``|V2``, as ``mtp-tvm run`` reads it); returns name -> dtype."""
    arrays = {k: to_numpy(v) for k, v in arrays.items()}
    write_npz(path, arrays)
    return {k: dtype_name(a) for k, a in arrays.items()}


def cli_command(compiled, options: GoldenOptions) -> str:
    """The ``mtp-tvm check`` command line that rebuilds this case with the same options (the sizes as resolved,
    the target as JSON unless it is the plain ``llvm``/``cuda``), and notes for what only the API can say."""
    tj = target_json(compiled.target)
    short = next((n for n in ("llvm", "cuda") if target_json(resolve_target(n)) == tj), None)
    s = compiled.shapes
    spec = dataclasses.replace(compiled.spec, tokens=s.tokens, vocab_shard=s.vocab_shard, owners=s.owners, tp=s.tp)
    debug = dataclasses.replace(compiled.debug, dump_passes=None, dump_only_changed=False, dump_filter=None,
                                dump_func=None, time_passes=False)
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


def lowering_gate(compiled) -> dict:
    """The gate of the failing build, restated for a build that starts at the lowering phases: the passes there
    are numbered from 1, so the limit moves down by the number of passes of the optimizing phases."""
    gate = compiled.gate or {"disabled": [], "limit": None}
    records = compiled.pass_records
    offset = sum(1 for r in records if r.phase in OPTIMIZING_PHASES)
    lowering = {r.name for r in records if r.phase not in OPTIMIZING_PHASES}
    limit = gate["limit"]
    return {"disabled": [n for n in gate["disabled"] if n in lowering],
            "limit": None if limit is None else max(limit - offset, 0)}


def write_repro(compiled, inputs: dict, expected: dict, options: GoldenOptions, result, root=None) -> Path:
    """Write ``repro/`` into the build's run folder (a new run folder under ``root`` when it has none)."""
    run = compiled.dump_dir or new_run_dir(root, f"{compiled.case.name}-{compiled.target.kind.name}")
    final = write_folder(run, REPRO_DIR, lambda tmp: _write_bundle(tmp, compiled, inputs, expected, options, result))
    if compiled.dump_dir is None:
        mark_complete(run)
    return final


def _write_bundle(tmp: Path, compiled, inputs: dict, expected: dict, options: GoldenOptions, result) -> None:
    s = compiled.shapes
    (tmp / "module.py").write_text(compiled.optimized_module.script())
    spec = {"case": compiled.case.name, "preset": s.preset.name, "frontend": compiled.frontend,
            "tokens": s.tokens, "vocab_shard": s.vocab_shard, "owners": s.owners, "tp": s.tp, "seed": options.seed,
            "schedule": compiled.schedule,
            "tolerance": dataclasses.asdict(options.tolerance), "logits_tol": dataclasses.asdict(options.logits_tol),
            "target": target_json(compiled.target), "gate": lowering_gate(compiled),
            "inputs": save_arrays(tmp / "inputs.npz", inputs),
            "outputs": save_arrays(tmp / "expected.npz", expected),
            "failed_outputs": result.failed_outputs, "written": time.strftime("%Y-%m-%d %H:%M:%S")}
    (tmp / "target.json").write_text(json.dumps(spec["target"], indent=1) + "\n")
    (tmp / "repro.json").write_text(json.dumps(spec, indent=1) + "\n")
    (tmp / "command.txt").write_text(cli_command(compiled, options))
    (tmp / "repro.py").write_text(launcher("mtp_tvm.tools.check.repro", "Reproducer written by mtp_tvm: rebuilds "
                                           "module.py for target.json, runs it on inputs.npz and\ncompares with "
                                           "expected.npz. Exit 1: the failure reproduces; 0: it does not; 2: this "
                                           "folder cannot be rerun."))


NOT_REPRODUCED, REPRODUCED, BROKEN = 0, 1, 2


def rerun(folder: Path, log=print) -> int:
    """Rebuild and re-check a reproducer folder: ``REPRODUCED`` (1) when the failure reproduces,
    ``NOT_REPRODUCED`` (0) when it does not, ``BROKEN`` (2, with one line saying why) when the folder cannot be
    rerun (a missing or damaged file), which must never read as either."""
    return guarded_rerun(_rerun, folder, log)


def guarded_rerun(body: Callable[[Path, Callable], int], folder: Path, log) -> int:
    """``body(folder, log)``, the verdict of a reproducer, with anything it raises (a missing or damaged file, a bad
    tolerance, a kernel that no longer builds) as ``BROKEN`` and one line why."""
    try:
        return body(folder, log)
    except MtpError as e:
        log(f"repro: error: {e}")
    except Exception as e:  # a missing file, bad JSON, a module.py that no longer parses or builds
        log(f"repro: error: cannot rerun {folder}: {type(e).__name__}: {last_line(e)}")
    return BROKEN


def rebuild_lowering(folder: Path, spec: dict):
    """``module.py`` rebuilt for ``target.json`` from the lowering phases on, under the saved pass gate: (the
    executable, its target, the build's seconds); a case's reproducer and a module file's share it."""
    from ...instrument.recorder import PassRecorder
    from ...passes.gate import PassGate
    from ...passes.pipeline import compile_through_phases

    target = resolve_target(json.loads((folder / "target.json").read_text()))
    mod = tvm.script.from_source((folder / "module.py").read_text())
    gate = PassGate.for_target(target, spec["gate"]["disabled"], spec["gate"]["limit"])
    t0 = time.perf_counter()
    with tvm.transform.PassContext(opt_level=3, instruments=[PassRecorder(gate)] if gate.active else []):
        ex = compile_through_phases(mod, target, None, first_phase=FIRST_LOWERING_PHASE)
    return ex, target, time.perf_counter() - t0


def _rerun(folder: Path, log) -> int:
    from ...compiler.driver import CompiledCase
    from ...compiler.options import BuildSpec
    from ...contract.cases import get_case
    from ...contract.presets import make_shapes
    from ...verify.results import summary_table

    spec = json.loads((folder / "repro.json").read_text())
    options = GoldenOptions(spec["seed"], RatioTolerance.of(spec["tolerance"]), LogitsTolerance.of(spec["logits_tol"]))
    case = get_case(spec["case"])
    shapes = make_shapes(spec["preset"], spec["tokens"], spec["vocab_shard"], spec["owners"], spec["tp"])
    ex, target, seconds = rebuild_lowering(folder, spec)
    asked = BuildSpec(case.name, target, shapes.preset.name, spec["frontend"], schedule=spec.get("schedule", "default"))
    compiled = CompiledCase(case, shapes, asked, target=target, executable=ex, build_seconds=seconds)
    inputs = read_npz(folder / "inputs.npz", spec["inputs"])
    expected = read_npz(folder / "expected.npz", spec["outputs"])
    built = Provenance(spec["target"], asked.frontend, asked.schedule, compiled.build_seconds)
    result = golden_check(compiled.run, case, shapes, built, options, golden=(inputs, expected), log=log)
    log(summary_table(result))
    if result.passed:
        log("NOT REPRODUCED: every output now meets its golden (the failure was in "
            f"{', '.join(spec['failed_outputs'])})")
        return NOT_REPRODUCED
    log(f"REPRODUCED: {', '.join(result.failed_outputs)} fail{'s' if len(result.failed_outputs) == 1 else ''} "
        f"the golden check")
    return REPRODUCED
