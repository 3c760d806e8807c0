"""The rule registry: what a schedule file's ``"rule"`` may name, pairing each rule's function with its knob
class, so loading a file (``files.py``) and applying it (``apply.py``) cannot disagree on what a rule is."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .cpu_rules import cpu_batched_gemm, cpu_gemm, cpu_generic, cpu_lm_head, cpu_rows
from .gpu_rules import gpu_flat, gpu_gemm, gpu_gemv, gpu_rows
from .knobs import CpuBatchedGemm, CpuGemm, CpuGeneric, CpuLmHead, CpuRows, GpuFlat, GpuGemm, GpuGemv, GpuRows


@dataclasses.dataclass(frozen=True)
class Rule:
    """``apply(sch, knobs, isa)`` schedules one kernel; ``knobs`` is the dataclass a file's entry is read into.
    ``samples``: ``apply`` also takes ``sample=`` (a ``cpu_rules.Sampler``), so a tuning space can sample knobs."""

    apply: Callable
    knobs: type
    samples: bool = False


RULES: dict[str, Rule] = {
    "cpu_gemm": Rule(cpu_gemm, CpuGemm, samples=True),
    "cpu_rows": Rule(cpu_rows, CpuRows, samples=True),
    "cpu_lm_head": Rule(cpu_lm_head, CpuLmHead),
    "cpu_generic": Rule(cpu_generic, CpuGeneric),  # kernels matched by pattern (patterns.py)
    "cpu_batched_gemm": Rule(cpu_batched_gemm, CpuBatchedGemm),  # batched matmuls matched by pattern
    "gpu_gemm": Rule(gpu_gemm, GpuGemm),
    "gpu_gemv": Rule(gpu_gemv, GpuGemv),
    "gpu_rows": Rule(gpu_rows, GpuRows),
    "gpu_flat": Rule(gpu_flat, GpuFlat),
}
