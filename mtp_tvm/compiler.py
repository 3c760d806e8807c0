"""``compile``: a case -> one TVM binary with typed input/output specs and a ``run(dict) -> dict``."""

from __future__ import annotations

import dataclasses
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
from .dumps import PassRecorder, new_run_dir
from .errors import BuildError, UsageError
from .model import build_relax_module, get_frontend
from .pipeline import compile_module
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


def compile(case: str = "tail", target: str | dict | Target = "llvm", preset: str = "flash",
            frontend: str = "tir", tokens: int | None = None, vocab_shard: int | None = None,
            dump_passes: bool | str | os.PathLike | None = None, only_changed: bool = False,
            owners: int | None = None, tp: int | None = None) -> CompiledCase:
    """Build ``case`` for ``target``. ``dump_passes`` = True dumps into ``dumps/``, a path dumps under it.
    ``owners`` and ``tp`` (default 2 and 2) size the TP-sharded LM head (cases ``lm-head``, ``tail-lm-head``)."""
    c = get_case(case)
    shapes = make_shapes(preset, tokens, vocab_shard, owners, tp)
    c.check_shapes(shapes)
    get_frontend(frontend)
    tgt = resolve_target(target)
    mod = build_relax_module(c, shapes, frontend)
    run_dir = None
    if dump_passes:
        run_dir = new_run_dir(None if dump_passes is True else dump_passes, f"{c.name}-{target_name(tgt)}")
    recorder = PassRecorder(run_dir, only_changed) if run_dir is not None else None
    if recorder is not None:
        recorder.write_input(mod)
    t0 = time.perf_counter()
    try:
        with tvm.transform.PassContext(opt_level=3, instruments=[recorder] if recorder else []):
            ex = compile_module(mod, tgt)
    except UsageError:
        raise
    except Exception as e:  # TVM errors are multi-line C++ traces; keep the last line for the user
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        raise BuildError(f"build of {c.name} for {target_name(tgt)} failed: {lines[-1] if lines else type(e).__name__}"
                         ) from e
    seconds = time.perf_counter() - t0
    if recorder is not None:
        recorder.finish({"case": c.name, "target": target_json(tgt), "preset": shapes.preset.name,
                         "frontend": frontend, "shapes": shapes.as_dict(), "build_seconds": seconds})
    return CompiledCase(c, shapes, tgt, frontend, ex, seconds, run_dir)
