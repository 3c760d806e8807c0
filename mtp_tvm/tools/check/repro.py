"""Reproducers: when a golden check fails, ``repro/`` in the run folder holds everything to rebuild and re-check
the failing module on its own, without the case machinery or the user's module file, the original command or its
pass plugin. One writer and one ``rerun`` for both kinds of check; what differs (``ReproRecord``) comes from the
check's own strategy (``check.CaseCheck`` / ``check.ModuleCheck``):

    module.py      the failing module as TVMScript: the module after the optimizing phases (legalize, fuse,
                   schedule and any user passes), i.e. exactly what the lowering phases were given
    inputs.npz     the inputs it ran (``write_npz``: what ``mtp-tvm run`` reads; repro.json has the dtypes): a
                   case's seeded inputs by name; a module file's main arguments ``arg0``... (the parameters in the
                   build's packed layout)
    expected.npz   the reference outputs (a case's torch goldens; a module file's reference)
    target.json    the target
    command.txt    the exact command that failed
    repro.json     its ``kind`` (case or module) and that kind's record (sizes, seed, tolerances), the pass gate of
                   the lowering phases
    repro.py       rebuilds module.py from the ``lower-dataflow`` phase on, runs it and compares; exits 1 when
                   the failure reproduces, 0 when it does not, 2 when the folder is broken (a missing or
                   damaged file: never read as either)

The folder appears atomically (written under a unique temporary name, then renamed).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import tvm

from ...compiler.arrays import dtype_name, read_npz, to_numpy, write_npz
from ...instrument.run_folder import mark_complete, new_run_dir
from ...passes.pipeline import FIRST_LOWERING_PHASE, OPTIMIZING_PHASES
from ...passes.target import device_for, resolve_target, target_json
from ...support.atomic_file import make_temp_dir, remove_own_temps, temp_prefix
from ...support.errors import MtpError, last_line
from ...verify.golden_check import GoldenOptions, Provenance, golden_check
from ...verify.tolerances import LogitsTolerance, ModuleTolerance, RatioTolerance

REPRO_DIR = "repro"
PROJECT_ROOT = Path(__file__).resolve().parents[3]  # the folder holding the mtp_tvm package

_LAUNCHER = '''"""{doc}"""
import sys
from pathlib import Path

if Path({root!r}, "mtp_tvm").is_dir():  # the mtp_tvm that wrote this reproducer
    sys.path.insert(0, {root!r})
try:
    from {module} import {function}
except ImportError as e:
    print(f"repro: error: cannot import mtp_tvm ({{e}}); install it or run from its checkout", file=sys.stderr)
    sys.exit(2)

sys.exit({function}(Path(__file__).resolve().parent))
'''


def launcher(module: str, function: str, doc: str) -> str:
    """A reproducer's ``repro.py``: calls ``function(its folder)`` of ``module``, from the checkout that wrote it
    when that is still there; exit 2 when mtp_tvm cannot be imported."""
    return _LAUNCHER.format(root=str(PROJECT_ROOT), module=module, function=function, doc=doc)


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


def ir_script(mod: tvm.IRModule) -> str:
    """``mod`` as TVMScript that parses back: its constants included (``show_meta``), and a non-finite scalar
    constant (a causal mask's ``-inf``), which TVM 0.27 prints as a string its parser refuses, as a float."""
    return re.sub(r'R\.const\("(-?inf|nan)", ', r'R.const(float("\1"), ', mod.script(show_meta=True))


@dataclasses.dataclass(frozen=True)
class ReproRecord:
    """What a failing check's strategy says of itself for ``repro/``: its ``kind`` ("case" or "module", which
    judge ``rerun`` uses), its fields of ``repro.json`` (sizes, seed, tolerances), the inputs and reference
    outputs saved beside it, and the command line that rebuilds it (``command.txt``)."""

    kind: str
    fields: dict
    inputs: dict
    expected: dict
    command: str


def write_repro(compiled, record: ReproRecord, result, root=None) -> Path:
    """Write ``repro/`` into the build's run folder (a new run folder under ``root`` when it has none)."""
    run = compiled.dump_dir or new_run_dir(root, f"{compiled.name}-{compiled.target.kind.name}")

    def fill(tmp: Path) -> None:
        (tmp / "module.py").write_text(ir_script(compiled.optimized_module))
        saved = {"kind": record.kind, **record.fields, "schedule": compiled.schedule,
                 "target": target_json(compiled.target), "gate": lowering_gate(compiled),
                 "inputs": save_arrays(tmp / "inputs.npz", record.inputs),
                 "outputs": save_arrays(tmp / "expected.npz", record.expected),
                 "failed_outputs": result.failed_outputs, "written": time.strftime("%Y-%m-%d %H:%M:%S")}
        (tmp / "target.json").write_text(json.dumps(saved["target"], indent=1) + "\n")
        (tmp / "repro.json").write_text(json.dumps(saved, indent=1) + "\n")
        (tmp / "command.txt").write_text(record.command)
        (tmp / "repro.py").write_text(launcher("mtp_tvm.tools.check.repro", "rerun", "Reproducer written by mtp_tvm "
                                               "check: rebuilds module.py for target.json, runs it on inputs.npz "
                                               "and\ncompares with expected.npz. Exit 1: the failure reproduces; 0: "
                                               "it does not; 2: this folder cannot be rerun."))

    final = write_folder(run, REPRO_DIR, fill)
    if compiled.dump_dir is None:
        mark_complete(run)
    return final


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
    from ...verify.results import summary_table

    record = json.loads((folder / "repro.json").read_text())
    kind = record.get("kind", "case")  # written before kinds: a case's
    if kind not in _JUDGES:
        raise MtpError(f"{folder / 'repro.json'}: unknown kind {kind!r}")
    judge, reference = _JUDGES[kind]
    result = judge(folder, record, log)
    log(summary_table(result))
    if result.passed:
        log(f"NOT REPRODUCED: every output now meets its {reference} (the failure was in "
            f"{', '.join(record['failed_outputs'])})")
        return NOT_REPRODUCED
    log(f"REPRODUCED: {', '.join(result.failed_outputs)} fail{'s' if len(result.failed_outputs) == 1 else ''} "
        f"the {reference} check")
    return REPRODUCED


def _judge_case(folder: Path, record: dict, log):
    """A case's reproducer run and judged as ``check`` judged it: every output through its checks."""
    from ...compiler.driver import CompiledCase
    from ...compiler.options import BuildSpec
    from ...contract.cases import get_case
    from ...contract.presets import make_shapes

    options = GoldenOptions(record["seed"], RatioTolerance.of(record["tolerance"]),
                            LogitsTolerance.of(record["logits_tol"]))
    case = get_case(record["case"])
    shapes = make_shapes(record["preset"], record["tokens"], record["vocab_shard"], record["owners"], record["tp"])
    ex, target, seconds = rebuild_lowering(folder, record)
    asked = BuildSpec(case.name, target, shapes.preset.name, record["frontend"],
                      schedule=record.get("schedule", "default"))
    compiled = CompiledCase(case, shapes, asked, target=target, executable=ex, build_seconds=seconds)
    inputs = read_npz(folder / "inputs.npz", record["inputs"])
    expected = read_npz(folder / "expected.npz", record["outputs"])
    built = Provenance(record["target"], asked.frontend, asked.schedule, compiled.build_seconds)
    return golden_check(compiled.run, case, shapes, built, options, golden=(inputs, expected), log=log)


def _judge_module(folder: Path, record: dict, _log):
    """A module file's reproducer: main run on its packed arguments, each output against the reference."""
    from ...compiler.tensors import to_host
    from ...verify.module_golden import check_outputs

    tolerance = ModuleTolerance.of(record["tolerance"])  # a bad one: before the build
    ex, target, seconds = rebuild_lowering(folder, record)
    dev = device_for(target)
    inputs = read_npz(folder / "inputs.npz", record["inputs"])
    vm = tvm.relax.VirtualMachine(ex, dev)
    t1 = time.perf_counter()
    outs = vm["main"](*[tvm.runtime.tensor(inputs[f"arg{i}"], dev) for i in range(len(inputs))])
    run_seconds = time.perf_counter() - t1
    outs = outs if record["returns_tuple"] else [outs]
    expected = read_npz(folder / "expected.npz", record["outputs"])
    actual = {name: to_host(outs[i]) for i, name in enumerate(expected)}
    built = Provenance(record["target"], "module", record["schedule"], seconds)
    return check_outputs(record["case"], record["shapes"], built, actual, expected, tolerance, run_seconds,
                         record["seed"])


_JUDGES = {"case": (_judge_case, "golden"), "module": (_judge_module, "reference")}  # kind -> judge, its word
