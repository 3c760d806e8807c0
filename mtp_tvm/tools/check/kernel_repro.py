"""A one-kernel reproducer: ``kernel_repro/`` holds the first differing call of ``localize``, its two kernels and
their recorded inputs, and reruns them without the case, the pipeline or the pass plugin that made them:

    test_kernel.py        the test build's PrimFunc as TVMScript, as it entered lowering (``optimized_module``)
    reference_kernel.py   the reference build's PrimFunc of the partnered call, likewise
    test_inputs.npz       each call's recorded tensor inputs (``in0``, ``in1``, ...; a weight in its build's
    reference_inputs.npz  layout, packed or not)
    kernel.json           per side: kernel, call, target, argument list (inputs, sizes passed by value, outputs
                          with shape and dtype); the tolerance; the command that localized it
    repro.py              builds both PrimFuncs (the lowering phases of ``mtp``), calls each on its inputs with
                          zeroed outputs and compares the outputs; exit 1 while they differ beyond the tolerance,
                          0 when they agree, 2 when the folder is broken

Edit ``test_kernel.py`` (or put another build's kernel there) and rerun: exit 0 says the fix holds. The folder
appears atomically, like ``repro/``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import tvm

from ...compiler.arrays import NUMPY_DTYPES, read_npz
from ...compiler.tensors import to_device
from ...instrument.run_folder import new_run_dir
from ...passes.pipeline import TIR_PIPELINE, register_with_tvm
from ...passes.target import device_for, resolve_target, target_json
from ...support.errors import MtpError
from ...verify.comparators import ratio_allclose
from ...verify.tolerances import RatioTolerance
from .repro import NOT_REPRODUCED, REPRODUCED, guarded_rerun, launcher, save_arrays, write_folder

KERNEL_REPRO_DIR = "kernel_repro"
SIDES = ("test", "reference")


def kernel_script(compiled, kernel: str) -> str:
    """The PrimFunc ``kernel`` of the module entering lowering, as a one-function module in TVMScript (with the
    global symbol the Relax build would give it, so it builds alone)."""
    func = compiled.optimized_module[kernel].with_attr("global_symbol", kernel)
    return tvm.IRModule({kernel: func}).script()


def write_kernel_repro(result, test, reference, options, root=None) -> Path:
    """Write ``kernel_repro/`` for ``result.first`` (a ``LocalizeResult``) into the test build's run folder (a
    new run folder under ``root`` when it has none)."""
    first = result.first
    run = test.dump_dir or new_run_dir(root, f"{test.name}-{test.target.kind.name}")

    def fill(tmp: Path) -> None:
        spec = {"case": result.case, "tolerance": dataclasses.asdict(options.tolerance),
                "against": str(options.against), "seed": options.seed,
                "written": time.strftime("%Y-%m-%d %H:%M:%S")}
        for side, compiled, call in (("test", test, first.test), ("reference", reference, first.reference)):
            (tmp / f"{side}_kernel.py").write_text(kernel_script(compiled, call.kernel))
            dtypes = save_arrays(tmp / f"{side}_inputs.npz",
                                  {f"in{i}": a for i, a in enumerate(call.input_arrays)})
            spec[side] = {"kernel": call.kernel, "call": call.index, "build": getattr(result, side),
                          "target": target_json(compiled.target), "inputs": dtypes,
                          "args": [list(a) for a in call.args],
                          "outputs": [[list(s), d] for s, d in call.outputs]}
        (tmp / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
        (tmp / "repro.py").write_text(launcher(
            "mtp_tvm.tools.check.kernel_repro", "rerun_kernels", "One-kernel reproducer written by mtp_tvm "
            "localize: builds test_kernel.py and reference_kernel.py,\ncalls each on its recorded inputs and "
            "compares the outputs. Exit 1: they differ; 0: they agree; 2: this folder cannot be rerun."))

    final = write_folder(run, KERNEL_REPRO_DIR, fill)
    if test.dump_dir is None:
        (run / "complete").write_text("")
    return final


def _run_side(folder: Path, side: str, spec: dict) -> list[np.ndarray]:
    """Build one side's kernel and call it on its recorded inputs; its outputs, zeroed before the call."""
    target = resolve_target(spec["target"])
    register_with_tvm()
    lib = tvm.compile(tvm.script.from_source((folder / f"{side}_kernel.py").read_text()), target=target,
                      tir_pipeline=TIR_PIPELINE)
    dev = device_for(target)
    inputs = read_npz(folder / f"{side}_inputs.npz", spec["inputs"])
    outputs = [to_device(np.zeros(shape, NUMPY_DTYPES[dtype]), dev) for shape, dtype in spec["outputs"]]
    args = [inputs[f"in{value}"] if kind == "in" else outputs[value] if kind == "out" else value
            for kind, value in spec["args"]]
    lib[spec["kernel"]](*[to_device(a, dev) if isinstance(a, np.ndarray) else a for a in args])
    return [o.numpy() for o in outputs]


def rerun_kernels(folder: Path, log=print) -> int:
    """Rebuild and compare both kernels of a ``kernel_repro/`` folder: ``REPRODUCED`` (1) while their outputs
    differ beyond the tolerance, ``NOT_REPRODUCED`` (0) when they agree, ``BROKEN`` (2, one line why: a missing
    or damaged file, a bad tolerance, a kernel that no longer builds)."""
    return guarded_rerun(_compare_kernels, folder, log)


def _compare_kernels(folder: Path, log) -> int:
    spec = json.loads((folder / "kernel.json").read_text())
    compare = ratio_allclose(RatioTolerance.of(spec["tolerance"]))
    t, r = spec["test"], spec["reference"]
    got = {side: _run_side(folder, side, spec[side]) for side in SIDES}
    if len(got["test"]) != len(got["reference"]):
        raise MtpError("the two kernels have a different number of outputs")
    differ = []
    for j, (a, e) in enumerate(zip(got["test"], got["reference"])):
        c = compare(a, e)
        log(f"output {j} {list(a.shape)}: {c.mismatches}/{c.numel} beyond tolerance, max |diff| "
            f"{c.max_abs_diff:.6g} at {c.worst_index} -> {'agree' if c.passed else 'DIFFER'}")
        differ += [] if c.passed else [j]
    if differ:
        log(f"REPRODUCED: {t['kernel']} (test call #{t['call']}) and {r['kernel']} (reference call #{r['call']}) "
            f"differ in output(s) {', '.join(map(str, differ))}")
        return REPRODUCED
    log(f"NOT REPRODUCED: {t['kernel']} and {r['kernel']} agree within the tolerance")
    return NOT_REPRODUCED
