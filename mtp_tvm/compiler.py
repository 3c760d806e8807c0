"""``compile``: a case -> one TVM binary with typed input/output specs and a ``run(dict) -> dict``."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import time
from pathlib import Path

import numpy as np
import tvm
from tvm import relax
from tvm.target import Target

from .cases import ROWS, TOKENS, Case, TensorSpec, get_case
from .config import Shapes, make_shapes
from .dumps import DumpOptions, PassRecord, PassRecorder, generated_code
from .errors import BuildError, UsageError
from .model import build_relax_module, get_frontend
from .pass_gate import PassGate, gate_summary
from .pass_plugin import ExtraPasses, extra_pass_names, resolve_extra_passes
from .pipeline import FIRST_LOWERING_PHASE, compile_module
from .target import device_for, resolve_target, target_json, target_name
from .tensors import run_main, validate_inputs


@dataclasses.dataclass
class CompiledCase:
    """One built case. ``run`` takes any token count T (the binary's token dim is symbolic)."""

    case: Case
    shapes: Shapes
    target: Target
    frontend: str
    executable: tvm.runtime.Executable
    build_seconds: float
    dump_dir: Path | None = None
    pass_records: list[PassRecord] = dataclasses.field(default_factory=list, repr=False)
    gate: dict | None = None                   # what --disable-pass / --bisect-limit did (pass_gate.gate_summary)
    optimized_module: tvm.IRModule | None = dataclasses.field(default=None, repr=False)  # entering lowering
    extra_passes: ExtraPasses | None = dataclasses.field(default=None, repr=False)
    dump_seconds: float = 0.0                  # writing the dumps after the build
    _vm: relax.VirtualMachine | None = dataclasses.field(default=None, repr=False)

    @property
    def input_specs(self) -> dict[str, TensorSpec]:
        return self.case.input_specs(self.shapes)

    @property
    def output_specs(self) -> dict[str, TensorSpec]:
        return self.case.output_specs(self.shapes)

    def run(self, inputs: dict) -> dict[str, np.ndarray]:
        """Run on named inputs (numpy with ``ml_dtypes.bfloat16`` for BF16, or torch); returns numpy outputs."""
        arrays, bound = validate_inputs(self.input_specs, inputs, f"case {self.case.name!r}")
        if bound:  # T directly, or R rows per owner
            self.case.check_shapes(self.shapes, bound.get(TOKENS, bound.get(ROWS, 0) * self.shapes.owners))
        dev = device_for(self.target)
        if self._vm is None:
            self._vm = relax.VirtualMachine(self.executable, dev)
        return run_main(self._vm, dev, arrays, self.output_specs)


def _validate_limit(limit) -> int | None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise UsageError(f"bisect limit must be an integer >= 0, got {limit!r}")
    return limit


def _check_disabled_names(gate: PassGate, records: list[PassRecord]) -> None:
    ran = {r.name for r in records}
    for name in sorted(gate.disabled - ran):
        close = difflib.get_close_matches(name, ran, n=3, cutoff=0.5)
        raise UsageError(f"--disable-pass {name}: no pass of that name runs"
                         + (f"; did you mean {', '.join(close)}?" if close else ""))


def compile(case: str = "tail", target: str | dict | Target = "llvm", preset: str = "flash",
            frontend: str = "tir", tokens: int | None = None, vocab_shard: int | None = None,
            dump_passes: bool | str | os.PathLike | None = None, only_changed: bool = False,
            dump_filter: str | None = None, dump_func: str | None = None, time_passes: bool = False,
            disable_passes=(), bisect_limit: int | None = None, extra_passes: ExtraPasses | None = None,
            owners: int | None = None, tp: int | None = None) -> CompiledCase:
    """Build ``case`` for ``target``. ``owners`` and ``tp`` (default 2 and 2) size the TP-sharded LM head (cases
    ``lm-head``, ``tail-lm-head``).

    Debugging: ``dump_passes`` = True dumps every pass into a new folder under ``dumps/``, a path dumps under
    it (``only_changed``, ``dump_filter`` regex on pass names, ``dump_func`` one function); ``time_passes``
    keeps per-pass records (time, changed) on the result; ``disable_passes`` skips passes by name;
    ``bisect_limit`` N skips every optional pass numbered after N; ``extra_passes`` ({phase: [Pass]}, or a
    callable of the target) adds user passes at the start of an optimizing phase.
    """
    c = get_case(case)
    shapes = make_shapes(preset, tokens, vocab_shard, owners, tp)
    c.check_shapes(shapes)
    get_frontend(frontend)
    tgt = resolve_target(target)
    extra = resolve_extra_passes(extra_passes, tgt)
    gate = PassGate.for_target(tgt, disable_passes, _validate_limit(bisect_limit), extra_pass_names(extra))
    dump = DumpOptions(None if dump_passes is True else dump_passes, only_changed, dump_filter,
                       dump_func) if dump_passes else None
    recorder = PassRecorder(gate, dump) if dump or time_passes or gate.active else None
    mod = build_relax_module(c, shapes, frontend)
    meta = {"case": c.name, "target": target_json(tgt), "preset": shapes.preset.name, "frontend": frontend,
            "shapes": shapes.as_dict()}
    captured = {}

    def on_phase(name, m):
        if name == FIRST_LOWERING_PHASE:
            captured["optimized"] = m

    if recorder is not None:
        recorder.record_input(mod)
    t0 = time.perf_counter()
    try:
        with tvm.transform.PassContext(opt_level=3, instruments=[recorder] if recorder else []):
            ex = compile_module(mod, tgt, extra, on_phase=on_phase)
    except UsageError:
        raise
    except Exception as e:  # TVM errors are multi-line C++ traces; keep the last line for the user
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        message = lines[-1] if lines else type(e).__name__
        run_dir = recorder.finish(meta, error=message) if recorder is not None else None
        where = f" (IR dumps: {run_dir})" if run_dir else ""
        raise BuildError(f"build of {c.name} for {target_name(tgt)} failed: {message}{where}") from e
    seconds = time.perf_counter() - t0
    records = recorder.records if recorder is not None else []
    _check_disabled_names(gate, records)
    t1 = time.perf_counter()
    run_dir = None
    if recorder is not None:
        run_dir = recorder.finish({**meta, "build_seconds": seconds},
                                  codegen=generated_code(ex) if dump else None)
    return CompiledCase(c, shapes, tgt, frontend, ex, seconds, run_dir, records,
                        gate_summary(records, gate) if gate.active else None, captured.get("optimized"),
                        extra_passes, time.perf_counter() - t1)
