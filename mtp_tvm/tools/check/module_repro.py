"""A failing ``check --module``'s reproducer: ``repro/`` as a case's (``repro.py``: the same folder, writer
and launcher), for the user's own module file, rerun without the file, torch or the pass plugin:

    module.py      the module entering lowering as TVMScript (after legalise, fuse, schedule and any user pass)
    inputs.npz     main's arguments as that module takes them (the activations checked, the parameters in the
                   build's packed layout): ``arg0``, ``arg1``, ...
    expected.npz   the reference outputs (``verify.module_golden``'s: torch's, or the reference build's)
    target.json    the target
    command.txt    the command that failed
    repro.json     the module, the sizes, the tolerance, the lowering phases' pass gate
    repro.py       rebuilds module.py from the ``lower-dataflow`` phase on, runs it and compares; exit 1 when the
                   failure reproduces, 0 when it does not, 2 when the folder is broken
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import time
from pathlib import Path

import tvm

from ...compiler.arrays import read_npz, to_numpy
from ...compiler.tensors import to_host
from ...instrument.run_folder import mark_complete, new_run_dir
from ...passes.target import device_for, target_json
from ...support.errors import MtpError
from ...verify.golden_check import Provenance
from ...verify.module_golden import check_outputs
from ...verify.tolerances import ModuleTolerance, Tolerance
from .repro import (
    NOT_REPRODUCED,
    REPRO_DIR,
    REPRODUCED,
    guarded_rerun,
    launcher,
    lowering_gate,
    rebuild_lowering,
    save_arrays,
    write_folder,
)


def module_script(mod: tvm.IRModule) -> str:
    """``mod`` as TVMScript that parses back: its constants included (``show_meta``), and a non-finite scalar
    constant (a causal mask's ``-inf``), which TVM 0.27 prints as a string its parser refuses, as a float."""
    return re.sub(r'R\.const\("(-?inf|nan)", ', r'R.const(float("\1"), ', mod.script(show_meta=True))


def write_module_repro(compiled, inputs: dict, expected: dict, tolerance: ModuleTolerance, result,
                       command: list[str], root=None) -> Path:
    """Write ``repro/`` of a failing module check into its run folder (a new one under ``root`` when it has
    none); ``inputs``: the inputs it ran, named as main's; ``command``: the argv that rebuilds it."""
    run = compiled.dump_dir or new_run_dir(root, f"{compiled.name}-{compiled.target.kind.name}")
    args = compiled.device_args([to_numpy(inputs[n]) for n in compiled.input_specs])

    def fill(tmp: Path) -> None:
        (tmp / "module.py").write_text(module_script(compiled.optimized_module))
        spec = {"kind": "module", "module": str(compiled.module_file.path), "case": compiled.name,
                "schedule": compiled.schedule, "shapes": result.shapes, "seed": result.seed,
                "tolerance": dataclasses.asdict(tolerance),
                "returns_tuple": compiled.returns_tuple, "target": target_json(compiled.target),
                "gate": lowering_gate(compiled),
                "inputs": save_arrays(tmp / "inputs.npz", {f"arg{i}": to_host(a) for i, a in enumerate(args)}),
                "outputs": save_arrays(tmp / "expected.npz", expected),
                "failed_outputs": result.failed_outputs, "written": time.strftime("%Y-%m-%d %H:%M:%S")}
        (tmp / "target.json").write_text(json.dumps(spec["target"], indent=1) + "\n")
        (tmp / "repro.json").write_text(json.dumps(spec, indent=1) + "\n")
        (tmp / "command.txt").write_text(shlex.join(command) + "\n")
        (tmp / "repro.py").write_text(launcher("mtp_tvm.tools.check.module_repro", "Reproducer written by mtp_tvm "
                                               "check --module: rebuilds module.py for target.json, runs it on "
                                               "inputs.npz and\ncompares with expected.npz. Exit 1: the failure "
                                               "reproduces; 0: it does not; 2: this folder cannot be rerun."))

    final = write_folder(run, REPRO_DIR, fill)
    if compiled.dump_dir is None:
        mark_complete(run)
    return final


def rerun(folder: Path, log=print) -> int:
    """Rebuild and re-check a module reproducer: ``REPRODUCED`` (1), ``NOT_REPRODUCED`` (0) or ``BROKEN`` (2,
    one line why), as ``repro.rerun``."""
    return guarded_rerun(_rerun, folder, log)


def _rerun(folder: Path, log) -> int:
    from ...verify.results import summary_table

    spec = json.loads((folder / "repro.json").read_text())
    tolerance = ModuleTolerance.of(spec["tolerance"])  # a bad one: before the build
    ex, target, seconds = rebuild_lowering(folder, spec)
    dev = device_for(target)
    inputs = read_npz(folder / "inputs.npz", spec["inputs"])
    vm = tvm.relax.VirtualMachine(ex, dev)
    t1 = time.perf_counter()
    outs = vm["main"](*[tvm.runtime.tensor(inputs[f"arg{i}"], dev) for i in range(len(inputs))])
    run_seconds = time.perf_counter() - t1
    outs = outs if spec["returns_tuple"] else [outs]
    expected = read_npz(folder / "expected.npz", spec["outputs"])
    actual = {name: to_host(outs[i]) for i, name in enumerate(expected)}
    built = Provenance(spec["target"], "module", spec["schedule"], seconds)
    result = check_outputs(spec["case"], spec["shapes"], built, actual, expected, tolerance, run_seconds,
                           spec["seed"])
    log(summary_table(result))
    if result.passed:
        log(f"NOT REPRODUCED: every output now meets its reference (the failure was in "
            f"{', '.join(spec['failed_outputs'])})")
        return NOT_REPRODUCED
    log(f"REPRODUCED: {', '.join(result.failed_outputs)} fail{'s' if len(result.failed_outputs) == 1 else ''} "
        "the reference check")
    return REPRODUCED


def module_command(compiled, shapes: dict | None, seed: int, tolerance: ModuleTolerance) -> list[str]:
    """The ``mtp-tvm check --module`` argv that rebuilds and rechecks this build."""
    debug = dataclasses.replace(compiled.debug, dump_passes=None, dump_only_changed=False, dump_filter=None,
                                dump_func=None, time_passes=False)
    argv = ["mtp-tvm", "check", "--module", str(compiled.module_file.path), "--schedule", compiled.schedule,
            "--target", json.dumps(target_json(compiled.target)), *debug.as_argv()]
    for name, shape in (shapes or {}).items():
        argv += ["--shape", f"{name}={','.join(map(str, shape))}"]
    argv += ["--seed", str(seed)] if seed else []
    return argv + Tolerance.restating(tolerance).argv()


def module_reproducers(compiled, result, inputs: dict, tolerance: ModuleTolerance, shapes: dict | None, seed: int,
                       dump_root, log) -> dict:
    """A failing module check's reproducers as ``CheckResult`` fields, as a case's (``tools.check``): ``repro/``
    (or why none), and with dumps ``kernel_repro/`` (the first kernel call that differs from a ``schedule=none``
    build, ``module_localize``)."""
    from ...verify.module_golden import module_golden
    from .module_localize import localize_module_failure

    found = {}
    try:
        expected = module_golden(compiled, inputs if shapes else None)
        found["repro_dir"] = str(write_module_repro(compiled, inputs, expected, tolerance, result,
                                                    module_command(compiled, shapes, seed, tolerance), dump_root))
    except (MtpError, OSError) as e:  # the failure is the news: report it (exit 1), and why no reproducer
        found["repro_error"] = str(e) if isinstance(e, MtpError) else f"{e.strerror}: {e.filename}"
    if compiled.dump_dir is not None:
        log("[LOCALIZE] every kernel call against schedule=none")
        try:
            found["kernel_repro_dir"] = localize_module_failure(compiled, tolerance).kernel_repro_dir
        except (MtpError, OSError) as e:
            log(f"[LOCALIZE] no kernel reproducer: {e}")
    return found
