"""Kernels matched by what their blocks compute, not by name: the CPU schedule of a PrimFunc that no hand
schedule file names (the Relax frontend's legalised and fused kernels: ``matmul``,
``fused_divide1_matmul_cast5_...``, ``transpose``, ``strided_slice``, the norms' pieces).

``match_kernel`` tries, in order:

- ``gemm``: a block ``Y[t, n] += A[t, k] * W[n, k]`` (or ``W[k, n]``: a Relax ``matmul`` reads its weight
  transposed) on trivial loops ``(t, n, k)``, casts allowed around both operands, N and K static; the kernel's
  other blocks all spatial (a fused elementwise prologue/epilogue: casts, scales, adds). Rule ``cpu_gemm`` with
  the knobs of the *twin*: the hand-scheduled TIR kernel whose GEMM has the same operand dtypes
  (``GEMM_TWINS``: BF16 x BF16 -> FP32 is ``lm_head_logits``, INT8 x INT8 -> INT32 ``w8a8_dual_gemm``), same
  schedule name (``default``, ``unpacked``, ...), with this kernel's block and buffer names; a signature
  without a twin gets ``CpuGemm``'s defaults (the tile still comes from the ISA). Spatial blocks that inline are
  computed into their consumers (``inline``), the rest form the epilogue. Like the TIR frontend's GEMMs, only
  ceil(T / q) * q token rows run (q: the tile's register rows), and 1, 2 or 4 for T up to those
  (``token_rows.row_variants``): the loops of the padded rows are cut before scheduling.
- ``bmm``: a batched matmul ``Y[b..., i, j] += A[b..., i, k] * B[b..., k, j]`` (attention's ``bmm``/``einsum``
  as torch.export gives them: ``B`` with ``j`` contiguous), casts allowed, i and j static; the other blocks
  spatial. Rule ``cpu_batched_gemm``: per batch a register tile of FMAs over vectors of ``j``, batches and row
  blocks in parallel (a contraction reading ``B[b..., j, k]`` is not this form and stays unscheduled).
- ``rows``: every block's outer loop binds a spatial iterator (token rows, or a weight's rows), reductions
  reduce one tensor (a row's sum or max, an argmax): elementwise chains, row reductions, copies, pads,
  slices, transposes. Rule ``cpu_generic``: spatial intermediates inlined, innermost spatial loops vectorised,
  outer loops of the blocks with work to share in parallel; reductions keep their order.
- nothing else: the kernel is lowered as written and named (``ApplySchedules.unscheduled``), e.g. a reduction
  over its outermost loop, or a contraction that is none of the forms above.

Which blocks inline is found by trying (``compute_inline`` on a scratch copy); the knobs name them, so the rule
applies a fixed list and the trace replays.
"""

from __future__ import annotations

import dataclasses
import math

import tvm
from tvm import s_tir, tirx
from tvm.ir.expr import TensorLoad
from tvm.target import Target

from ..passes.target import CpuIsa
from .cpu_rules import row_quantum
from .files import DEFAULT, KernelSchedule, load_schedules
from .knobs import CpuBatchedGemm, CpuGemm, CpuGeneric, GemmOperands
from .token_rows import row_variants

GEMM = "gemm"
BMM = "bmm"
ROWS = "rows"

# (activation, weight, accumulator) dtypes -> the hand-scheduled TIR kernel with that GEMM (tests check each by
# matching the TIR kernel itself); a Relax GEMM of the same signature takes its knobs.
GEMM_TWINS = {
    ("bfloat16", "bfloat16", "float32"): "lm_head_logits",
    ("int8", "int8", "int32"): "w8a8_dual_gemm",
}
PARALLEL_MIN_WORK = 64  # a block's outer loop runs in parallel when each of its iterations has this much work


@dataclasses.dataclass(frozen=True)
class GemmBlock:
    """A GEMM block found in a kernel: its activation and weight buffers (by name), whether the weight is
    ``[K, N]``, the operand dtypes and the static column count."""

    block: str
    activation: str
    weight: str
    k_major: bool
    signature: tuple[str, str, str]  # activation, weight, accumulator dtypes
    columns: int


@dataclasses.dataclass(frozen=True)
class PatternMatch:
    """A kernel's pattern and the schedule derived from it. ``func`` is what the schedule applies to: the
    kernel with its token rows trimmed to ``row_quantum`` (GEMMs over the symbolic token rows), else as is."""

    pattern: str
    schedule: KernelSchedule
    func: tirx.PrimFunc
    twin: str | None = None
    gemms: tuple[GemmBlock, ...] = ()
    row_quantum: int | None = None


@dataclasses.dataclass(frozen=True)
class _Leaf:
    block: s_tir.SBlock
    iter_values: list
    loops: list  # tirx.For, outermost first


class _NoPattern(Exception):
    pass


def _leaves(stmt, loops: tuple = ()) -> list[_Leaf]:
    """The blocks under the root block with their loop nests, in program order."""
    if isinstance(stmt, tirx.For):
        return _leaves(stmt.body, (*loops, stmt))
    if isinstance(stmt, tirx.SeqStmt):
        return [leaf for s in stmt.seq for leaf in _leaves(s, loops)]
    if isinstance(stmt, s_tir.SBlockRealize):
        return [_Leaf(stmt.block, list(stmt.iter_values), list(loops))]
    raise _NoPattern(type(stmt).__name__)  # opaque structure (lets, conditions, allocations): no pattern


def _root(func: tirx.PrimFunc) -> s_tir.SBlock:
    if not isinstance(func.body, s_tir.SBlockRealize):
        raise _NoPattern("no root block")
    return func.body.block


def _is(expr, var) -> bool:
    return isinstance(expr, tirx.Var) and expr.same_as(var)


def _indexed(indices, *variables) -> bool:
    return len(indices) == len(variables) and all(_is(i, v) for i, v in zip(indices, variables))


def _is_load(expr) -> bool:
    return isinstance(expr, TensorLoad)


def _uncast(expr):
    while isinstance(expr, tirx.Cast):
        expr = expr.value
    return expr


def _kinds(block: s_tir.SBlock) -> list[int]:
    return [int(iv.iter_type) for iv in block.iter_vars]


def _gemm_block(leaf: _Leaf) -> GemmBlock | None:
    """The leaf as a GEMM ``Y[t, n] += A[t, k] * W[n, k]`` (or ``W[k, n]``), or None."""
    b = leaf.block
    if _kinds(b) != [tirx.IterVar.DataPar, tirx.IterVar.DataPar, tirx.IterVar.CommReduce] or len(leaf.loops) != 3:
        return None
    if not all(_is(v, lp.loop_var) for v, lp in zip(leaf.iter_values, leaf.loops)) or b.init is None:
        return None
    t, n, k = (iv.var for iv in b.iter_vars)
    store = b.body
    if not isinstance(store, tirx.BufferStore) or not _indexed(store.indices, t, n):
        return None
    value = store.value
    if not (isinstance(value, tirx.Add) and _is_load(value.a) and value.a.source.same_as(store.buffer)
            and _indexed(value.a.indices, t, n) and isinstance(value.b, tirx.Mul)):
        return None
    x, y = _uncast(value.b.a), _uncast(value.b.b)
    if not (_is_load(x) and _is_load(y)):
        return None
    for act, w in ((x, y), (y, x)):
        if _indexed(act.indices, t, k) and (_indexed(w.indices, n, k) or _indexed(w.indices, k, n)):
            extents = [lp.extent for lp in leaf.loops[1:]]
            if not all(isinstance(e, tirx.IntImm) for e in extents):
                return None
            return GemmBlock(b.name_hint, act.source.name, w.source.name, _indexed(w.indices, k, n),
                             (act.source.dtype, w.source.dtype, store.buffer.dtype), int(extents[0]))
    return None


def _bmm_block(leaf: _Leaf) -> bool:
    """Whether the leaf is a batched matmul ``Y[b..., i, j] += A[b..., i, k] * B[b..., k, j]`` with static i, j."""
    b = leaf.block
    kinds = _kinds(b)
    if len(kinds) < 4 or kinds[-1] != tirx.IterVar.CommReduce or set(kinds[:-1]) != {tirx.IterVar.DataPar} \
            or len(leaf.loops) != len(kinds) or b.init is None:
        return False
    if not all(_is(v, lp.loop_var) for v, lp in zip(leaf.iter_values, leaf.loops)):
        return False
    *batch, i, j, k = (iv.var for iv in b.iter_vars)
    store = b.body
    if not isinstance(store, tirx.BufferStore) or not _indexed(store.indices, *batch, i, j):
        return False
    value = store.value
    if not (isinstance(value, tirx.Add) and _is_load(value.a) and value.a.source.same_as(store.buffer)
            and _indexed(value.a.indices, *batch, i, j) and isinstance(value.b, tirx.Mul)):
        return False
    x, y = _uncast(value.b.a), _uncast(value.b.b)
    if not (_is_load(x) and _is_load(y)):
        return False
    if not (_indexed(x.indices, *batch, i, k) and _indexed(y.indices, *batch, k, j)):
        return False
    return all(isinstance(lp.extent, tirx.IntImm) for lp in leaf.loops[-3:-1])


def _row_outer(leaf: _Leaf) -> bool:
    """Whether the block's outermost loop binds a spatial iterator directly (its rows)."""
    if not leaf.loops:
        return False
    outer = leaf.loops[0].loop_var
    return any(_is(v, outer) and int(iv.iter_type) == tirx.IterVar.DataPar
               for v, iv in zip(leaf.iter_values, leaf.block.iter_vars))


def _row_reduction(leaf: _Leaf) -> bool:
    """A reduction of one tensor (a row's sum, max, argmax): it reads one buffer besides its own outputs."""
    own = {w.source.name for w in leaf.block.writes}
    return len({r.source.name for r in leaf.block.reads} - own) <= 1


def _inlinable(func: tirx.PrimFunc, candidates: list[str]) -> tuple[str, ...]:
    """The candidate blocks ``compute_inline`` accepts, in the order it accepted them (tried on a copy)."""
    sch = s_tir.Schedule(tvm.IRModule({"main": tvm.ir.load_json(tvm.ir.save_json(func))}))
    done: list[str] = []
    pending = list(candidates)
    progress = True
    while pending and progress:
        progress = False
        for name in list(pending):
            try:
                sch.compute_inline(sch.get_sblock(name))
            except (s_tir.ScheduleError, tvm.TVMError, ValueError):
                continue
            done.append(name)
            pending.remove(name)
            progress = True
    return tuple(done)


def _writes_param(leaf: _Leaf, func: tirx.PrimFunc) -> bool:
    params = {p.name for p in func.params if isinstance(p.ty, tirx.BufferType)}
    return any(w.source.name in params for w in leaf.block.writes)


def _static(expr) -> int | None:
    return int(expr) if isinstance(expr, tirx.IntImm) else None


def _inner_work(leaf: _Leaf) -> int:
    """Iterations inside the outer loop (static loops only; a symbolic one counts as 1)."""
    return math.prod(_static(lp.extent) or 1 for lp in leaf.loops[1:])


def _vectorizable(leaf: _Leaf, lanes: int) -> bool:
    """The innermost loop binds a spatial iterator and has a static extent a vector of 2+ lanes divides."""
    if not leaf.loops:
        return False
    inner = leaf.loops[-1]
    extent = _static(inner.extent)
    spatial = any(_is(v, inner.loop_var) and int(iv.iter_type) == tirx.IterVar.DataPar
                  for v, iv in zip(leaf.iter_values, leaf.block.iter_vars))
    return spatial and extent is not None and math.gcd(extent, lanes) > 1


def _twin_knobs(target: Target, isa: CpuIsa, signature, schedule: str) -> tuple[str | None, str, CpuGemm | None]:
    """``(twin kernel, the schedule name used, its CpuGemm knobs on this ISA)``; None knobs: no usable twin."""
    twin = GEMM_TWINS.get(signature)
    per_kernel = load_schedules(target).get(twin, {}) if twin else {}
    ks = per_kernel.get(schedule, per_kernel.get(DEFAULT))
    if ks is None or ks.rule != "cpu_gemm":
        return None, DEFAULT, None
    return twin, ks.name, ks.knobs_for(isa.name)


def _match_gemm(func, leaves, target, isa, schedule) -> PatternMatch | None:
    gemms = [g for g in map(_gemm_block, leaves) if g is not None]
    others = [leaf for leaf in leaves if leaf.block.name_hint not in {g.block for g in gemms}]
    if not gemms or any(set(_kinds(leaf.block)) != {tirx.IterVar.DataPar} or not _row_outer(leaf)
                        for leaf in others):
        return None
    signatures = {g.signature for g in gemms}
    twin, name, knobs = _twin_knobs(target, isa, gemms[0].signature, schedule) if len(signatures) == 1 \
        else (None, DEFAULT, None)
    widen = next(iter(knobs.blocks.values())).widen if knobs is not None and knobs.blocks else False
    blocks = {g.block: GemmOperands(g.activation, g.weight, widen) for g in gemms}
    knobs = CpuGemm(blocks=blocks) if knobs is None else dataclasses.replace(knobs, blocks=blocks)
    quantum = min(row_quantum(knobs, isa, g.columns, (g.signature[0], g.signature[2])) for g in gemms)
    trimmed = row_variants(func, quantum)
    quantum, func = (quantum if trimmed is not func else None), trimmed
    # a GEMM's own operands stay loads (its pattern); everything else spatial that is not an output may inline
    operands = {name for g in gemms for name in (g.activation, g.weight)}
    candidates = [leaf.block.name_hint for leaf in others if not _writes_param(leaf, func)
                  and not {w.source.name for w in leaf.block.writes} & operands]
    inline = _inlinable(func, candidates)
    epilogue = tuple(leaf.block.name_hint for leaf in others if leaf.block.name_hint not in inline)
    knobs = dataclasses.replace(knobs, inline=inline, epilogue=epilogue)
    source = f"pattern gemm <- {twin} knobs" if twin else "pattern gemm (CpuGemm defaults)"
    return PatternMatch(GEMM, KernelSchedule(twin or "gemm", name, "cpu_gemm", knobs, {}, source), func, twin,
                        tuple(gemms), quantum)


def _match_bmm(func, leaves) -> PatternMatch | None:
    bmms = [leaf for leaf in leaves if _bmm_block(leaf)]
    others = [leaf for leaf in leaves if leaf not in bmms]
    if len(bmms) != 1 or any(set(_kinds(leaf.block)) != {tirx.IterVar.DataPar} or not _row_outer(leaf)
                             for leaf in others):
        return None
    operands = {r.source.name for r in bmms[0].block.reads} - {w.source.name for w in bmms[0].block.writes}
    candidates = [leaf.block.name_hint for leaf in others if not _writes_param(leaf, func)
                  and not {w.source.name for w in leaf.block.writes} & operands]
    inline = _inlinable(func, candidates)
    epilogue = tuple(leaf.block.name_hint for leaf in others if leaf.block.name_hint not in inline)
    knobs = CpuBatchedGemm(block=bmms[0].block.name_hint, inline=inline, epilogue=epilogue)
    return PatternMatch(BMM, KernelSchedule("bmm", DEFAULT, "cpu_batched_gemm", knobs, {}, "pattern bmm"), func)


def _match_rows(func, leaves, isa) -> PatternMatch | None:
    if not leaves or not all(_row_outer(leaf) for leaf in leaves):
        return None
    if not all(_row_reduction(leaf) for leaf in leaves if tirx.IterVar.CommReduce in _kinds(leaf.block)):
        return None
    if any(_gemm_block(leaf) for leaf in leaves):
        return None
    candidates = [leaf.block.name_hint for leaf in leaves if set(_kinds(leaf.block)) == {tirx.IterVar.DataPar}
                  and not _writes_param(leaf, func)]
    inline = _inlinable(func, candidates)
    rest = [leaf for leaf in leaves if leaf.block.name_hint not in inline]
    knobs = CpuGeneric(
        inline=inline,
        vectorize=tuple(leaf.block.name_hint for leaf in rest if _vectorizable(leaf, isa.fp32_lanes)),
        parallel=tuple(leaf.block.name_hint for leaf in rest
                       if _inner_work(leaf) >= PARALLEL_MIN_WORK or (_static(leaf.loops[0].extent) or 0)
                       >= PARALLEL_MIN_WORK))
    return PatternMatch(ROWS, KernelSchedule("rows", DEFAULT, "cpu_generic", knobs, {}, "pattern rows"), func)


def match_kernel(func: tirx.PrimFunc, target: Target, isa: CpuIsa, schedule: str = DEFAULT) -> PatternMatch | None:
    """The pattern of a CPU kernel no schedule file names and the schedule derived from it, or None (see the
    module docstring). ``schedule``: the build's schedule name, looked up in a GEMM twin's file."""
    try:
        leaves = _leaves(_root(func).body)
    except _NoPattern:
        return None
    return (_match_gemm(func, leaves, target, isa, schedule) or _match_bmm(func, leaves)
            or _match_rows(func, leaves, isa))
