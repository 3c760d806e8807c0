"""The rule registry: what a schedule file's ``"rule"`` may name, pairing each rule's function with its knob
class, so loading a file (``files.py``) and applying it (``apply.py``) cannot disagree on what a rule is."""

from __future__ import annotations

import dataclasses
from typing import Callable

from .cpu_rules import cpu_gemm, cpu_lm_head, cpu_rows
from .gpu_rules import gpu_flat, gpu_gemm, gpu_rows
from .knobs import CpuGemm, CpuLmHead, CpuRows, GpuFlat, GpuGemm, GpuRows


@dataclasses.dataclass(frozen=True)
class Rule:
    """``apply(sch, knobs, isa)`` schedules one kernel; ``knobs`` is the dataclass a file's entry is read into."""

    apply: Callable
    knobs: type


RULES: dict[str, Rule] = {
    "cpu_gemm": Rule(cpu_gemm, CpuGemm),
    "cpu_rows": Rule(cpu_rows, CpuRows),
    "cpu_lm_head": Rule(cpu_lm_head, CpuLmHead),
    "gpu_gemm": Rule(gpu_gemm, GpuGemm),
    "gpu_rows": Rule(gpu_rows, GpuRows),
    "gpu_flat": Rule(gpu_flat, GpuFlat),
}
