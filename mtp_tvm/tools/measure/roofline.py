"""The roofline model ``bench`` and ``--profile`` both judge by: the least time some work can take here,
``max(bytes / bandwidth, FLOPs / peak)``. Bytes are what the work must move (each input read once, each output
written once); FLOPs the useful ``2*M*K*N`` of its GEMMs (``Stage.gemms``, token rows the real ones, not the
padded 16); the peak that of the instruction each GEMM runs on (``gemm_kind``: its operands' dot product where the
build's code has it, else the FP32 FMA), combined over the GEMMs by their FLOPs (``roofline_peak``). The peaks
and the bandwidth are measured (``peaks.py``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...compiler.arrays import NUMPY_DTYPES
from ...contract.cases import TOKENS, Case, Stage
from ...contract.presets import Shapes
from ...passes.target import is_gpu
from .kernel_code import assembly_kernels
from .peaks import BF16_DOT, BF16_TILE, FMA, INT8_DOT, INT8_TILE

if TYPE_CHECKING:
    from ...compiler.driver import CompiledCase


FAMILIES = {FMA: ("fma",), BF16_DOT: ("vdpbf16ps",), INT8_DOT: ("vpmaddwd", "vpdpwssd"),
            BF16_TILE: ("tdpbf16ps",), INT8_TILE: ("tdpbssd",)}  # kernel_code's families


def flops(case: Case, s: Shapes, rows: int) -> float:
    """``2*M*K*N`` over every GEMM of the case's stages (``Stage.gemms``), token rows counted as ``rows``."""
    return float(sum(2 * (rows if m == TOKENS else m) * k * n for st in case.chain for m, k, n in st.gemms(s)))


def bytes_moved(case: Case, s: Shapes) -> float:
    """Every input read once and every output written once, at ``s.tokens``: the least traffic any
    implementation needs."""
    specs = (*case.input_specs(s).values(), *case.output_specs(s).values())
    return float(sum(math.prod(sp.concrete(s.tokens)) * NUMPY_DTYPES[sp.dtype].itemsize for sp in specs))


# GEMM operand dtype -> the dot products it can run on, the most work per instruction first
DOTS_OF_DTYPE = {"bfloat16": (BF16_TILE, BF16_DOT), "int8": (INT8_TILE, INT8_DOT)}


def gemm_kind(dtype: str, used: set[str]) -> str:
    """The instruction a GEMM of ``dtype`` operands runs on: its dot product where the build's code has it
    (``used``), else the FP32 FMA (an int8 GEMM without one widens and multiplies: the FMA peak bounds it)."""
    return next((dot for dot in DOTS_OF_DTYPE.get(dtype, ()) if dot in used), FMA)


def gemm_dtype(stage: Stage, s: Shapes) -> str:
    """A stage's GEMM operand dtype: that of its largest input that is not token-major (its weight)."""
    weights = [p for p in stage.params if TOKENS not in p.shape(s)]
    return max(weights, key=lambda p: math.prod(d for d in p.shape(s) if isinstance(d, int))).dtype if weights \
        else "float32"


def gemm_work(case: Case, s: Shapes, used: set[str]) -> dict[str, float]:
    """Useful FLOPs (T real rows) per instruction kind the case's GEMMs run on."""
    work: dict[str, float] = {}
    for st in case.chain:
        kind = gemm_kind(gemm_dtype(st, s), used)
        for m, k, n in st.gemms(s):
            work[kind] = work.get(kind, 0.0) + 2.0 * (s.tokens if m == TOKENS else m) * k * n
    return work


def roofline_peak(work: dict[str, float], peaks: dict[str, float]) -> tuple[float, str]:
    """``(GFLOP/s, which)``: the peak the GEMMs' FLOPs can reach, each kind at its measured peak (a kind without
    a probe on this target at the FMA's), combined by FLOPs (the time at each peak adds up). No GEMMs: FMA."""
    used = {kind: peaks.get(kind, peaks[FMA]) for kind in work}
    if not used:
        return peaks[FMA], FMA
    seconds = sum(f / used[kind] for kind, f in work.items())
    label = " + ".join(kind if kind in peaks else f"{kind} (no probe: fma)" for kind in sorted(work))
    return sum(work.values()) / seconds, label


def roofline_ms(useful_flops: float, moved_bytes: float, peak_gflops: float | None, bandwidth_gbs: float) -> float:
    """The least time the work can take here: moving its bytes at the measured bandwidth, or its FLOPs at the
    peak, whichever is longer (the bytes alone where no peak was measured: a prebuilt artifact's bench)."""
    compute = 0.0 if peak_gflops is None else useful_flops / peak_gflops
    return max(moved_bytes / bandwidth_gbs, compute) / 1e6


def instruction_mix(compiled: CompiledCase) -> dict[str, dict[str, int]]:
    """Kernel -> its FMA and dot-product instruction counts in the build's assembly (``code_stats``), for the
    kernels that have any; empty for a GPU build."""
    if is_gpu(compiled.target):
        return {}
    asm = "\n".join(m.inspect_source("asm") for m in compiled.executable.mod.imports if m.kind == "llvm")
    families = [f for fams in FAMILIES.values() for f in fams]
    return {name: {f: code.families.get(f, 0) for f in families} for name, code in sorted(assembly_kernels(asm).items())
            if any(code.families.get(f) for f in families)}


def kinds_used(mix: dict[str, dict[str, int]]) -> set[str]:
    """The instruction kinds (``fma``, ``bf16_dot``, ``int8_dot``) whose instructions the code contains."""
    return {kind for kind, fams in FAMILIES.items() if any(counts.get(f) for counts in mix.values() for f in fams)}
