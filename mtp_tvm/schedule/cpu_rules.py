"""CPU schedule rules. Each takes an ``s_tir.Schedule`` of one kernel, its typed knobs and the target's
``CpuIsa``; what a knob leaves open (vector lanes, the register tile) is derived from the ISA, so one schedule
file serves AVX2, AVX-512 and NEON and a tile never exceeds the register file it runs on."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

from tvm import s_tir, tirx

from ..passes.target import CpuIsa
from ..support.rounding import ceil_div
from . import amx_dot
from .amx_dot import apply_amx_dot
from .bf16_dot import apply_bf16_dot, bf16_lanes
from .int8_dot import apply_int8_dot, int8_lanes
from .knobs import CpuBatchedGemm, CpuGemm, CpuGeneric, CpuLmHead, CpuRows
from .steps import buffer_read_index, pack_weight_columns, vectorized_rows
from .token_rows import row_variant_blocks

ROW_QUANTA = (8, 4, 2, 1)  # register rows must divide the token tile of 16: the row loop is a multiple of them
K_CHUNKS = (32, 64, 128, 256)  # K chunks a tuning space samples (those dividing K)
MAX_STREAMS = 12  # accumulator vectors a small-T tile spans at most (``side_by_side``)
# reductions a row kernel keeps in flight (``interleave-chains``): an add's latency (4 cycles) x the 2 ports that
# issue it on every x86 core here
CHAINS = 8
LINE_BYTES = 64  # a BF16 tile's packed strip holds at most one cache line per K step (``packed_strip``)

# ``sample(knob, loop, choices, value)``: the split factors of ``loop`` for a knob (its inner factor) that
# MetaSchedule may sample. Outside tuning they are ``[None, value]``; a design space (``space.py``) returns
# sampled variables (a perfect tile of a static loop, else a categorical over ``choices``), so the split is
# re-sampled, and mutated, whenever the search replays the trace.
Sampler = Callable[[str, object, list[int], int], list]


def fixed(_knob: str, _loop, _choices: list[int], value: int) -> list:
    """The ``Sampler`` of a plain build: the knob's own value."""
    return [None, value]


def fitting_rows(isa: CpuIsa, strip: int, row_extent: int) -> list[int]:
    """Register rows a strip of ``strip`` columns leaves room for, dividing the row loop's ``row_extent``."""
    vectors = ceil_div(strip, isa.fp32_lanes)
    return [r for r in ROW_QUANTA if row_extent % r == 0 and r * vectors + vectors + 1 <= isa.vector_registers]


def register_tile(isa: CpuIsa, columns: int, knobs: CpuGemm) -> tuple[int, int]:
    """``(register_rows, strip_columns)``: the knobs' values, or else the most register rows (up to 8, the
    largest divisor of the token tile that leaves room) with one vector of columns. The GEMMs are skinny (T
    rows against a weight streamed from memory), so they are bandwidth-bound: wider strips only grow the
    accumulator tile and the packed strip without saving traffic (measured on Zen 4: 8 x 16 columns 26 ms,
    8 x 32 43 ms, 4 x 80 over 270 ms for the FLASH logits; AVX2 code: 8 x 8 and 4 x 16 both ~27 ms). A strip
    divides ``columns`` (so strips and the packed layout need no bounds checks; a shard no whole vector divides
    gets a part of one, e.g. 8 columns of 1000) and the tile fits the register file with its weight vectors and
    a broadcast (``rows * vectors + vectors + 1 <= registers``)."""
    lanes = isa.fp32_lanes
    widths = [c * lanes for c in range(1, isa.vector_registers)] + [lanes >> i for i in range(1, lanes.bit_length())]
    fits = [(r, w) for r in ROW_QUANTA for w in widths
            if r * ceil_div(w, lanes) + ceil_div(w, lanes) + 1 <= isa.vector_registers and columns % w == 0
            and knobs.register_rows in (None, r) and knobs.column_vectors in (None, w / lanes)]
    if not fits:
        raise ValueError(f"no register tile of {knobs.register_rows or 'any'} rows x {knobs.column_vectors or 'any'} "
                         f"vectors of {lanes} lanes fits {isa.vector_registers} registers and divides {columns} "
                         "columns")
    return max(fits, key=lambda rw: (rw[0], min(rw[1], lanes), -rw[1]))


BF16_OPERANDS = ("bfloat16", "float32")  # a GEMM's (activation, accumulator) dtypes that the BF16 dots take


def tile_dot(knobs: CpuGemm, isa: CpuIsa, operands: tuple[str, str]) -> amx_dot.TileDot | None:
    """The AMX product a GEMM block of these (activation, accumulator) dtypes runs on, or None."""
    if not (knobs.dot_products and knobs.pack_weight):
        return None
    return next((d for d in amx_dot.TILE_DOTS.values() if d.operands == operands and amx_dot.has_tiles(isa, d)),
                None)


def row_quantum(knobs: CpuGemm, isa: CpuIsa, columns: int, operands: tuple[str, str] = ("", "")) -> int:
    """The rows the kernel's row loop is rounded up to (its register rows): only ceil(T / r) * r rows run. A GEMM
    on AMX tiles runs 16, a tile's rows: every weight tile is then loaded once at any T <= 16, where two blocks of
    8 rows load it twice (FLASH logits, SPR, T = 16: 5.2-5.5 ms with blocks of 8 rows, the weight read in 3.9-4.2
    at T = 8), and a tile of 16 rows computes in the time of its weight's load."""
    if tile_dot(knobs, isa, operands):
        return amx_dot.MAX_ROWS
    return register_tile(isa, columns, knobs)[0]


def block_operands(sch: s_tir.Schedule, block, io) -> tuple[str, str]:
    """A GEMM block's (activation, accumulator) dtypes."""
    stmt = sch.get(block)
    return stmt.reads[buffer_read_index(sch, block, io.activation)].source.dtype, stmt.writes[0].source.dtype


def most_rows(tile: tuple[int, int]) -> tuple:
    """``dot_tile``'s default order: the most rows, then the most accumulators, so each weight load serves the
    most rows and each broadcast the most columns (measured on this project's machines: ``vdpbf16ps`` at T = 8,
    FLASH, 8 x 2 zmm against 4 x 2 and 4 x 5: 11.4, 12.0, 13.0 ms)."""
    rows, vectors = tile
    return rows, rows * vectors


def shared_broadcasts(tile: tuple[int, int]) -> tuple:
    """The ymm dots' order: up to 8 accumulators (two vector pipes x 4 cycles of latency: the pipes full; more
    leave no spare register), then a tile of at least two vectors (each row's broadcasts then feed two vectors: a
    4 x 2 tile broadcasts half as often as 8 x 1), then the most rows, then the fewest vectors. AVX2 builds, 4 x 2
    against 8 x 1 in the same rounds (``--compare-schedules``), median ms at T = 8 and 16: FLASH logits (BF16 pair
    dot, FMA form) on Zen 4 8.1 / 10.6 and 15.4 / 21.1, on Ice Lake 11.0 / 11.9 and 17.7 / 24.8, on Sapphire
    Rapids 5.7 / 5.2 and 11.2 / 10.4 (the one loss); the projection (``vpmaddwd``) on Zen 4 2.9 / 3.5-3.9 and
    5.3 / 7.4 (``docs/benchmarks.md``)."""
    rows, vectors = tile
    return min(rows * vectors, 8), vectors >= 2, rows, -vectors


def dot_tile_order(isa: CpuIsa) -> Callable[[tuple[int, int]], tuple]:
    """``dot_tile``'s order for a register dot on this ISA: ``shared_broadcasts`` on 256-bit vectors (measured
    there), ``most_rows`` on wider ones."""
    return shared_broadcasts if isa.vector_bits == 256 else most_rows


class DotPath(NamedTuple):
    """A dot-product schedule for a block on an ISA: ``apply`` (``apply_amx_dot``/``apply_bf16_dot``/
    ``apply_int8_dot``), its accumulator ``lanes``, and the registers one step needs besides the accumulators:
    per column vector (the weight) and per row (the broadcast activation: one pair, or its two FP32 values in the
    FMA form of the BF16 pair dot). A path on tile registers (AMX) counts accumulator tiles instead."""

    apply: Callable
    lanes: int
    weight_registers: int = 1
    broadcast_registers: int = 1
    step_bytes: int = 0  # weight bytes a vector reads per K step, where strips are a cache line (0: the tile's)
    accumulator_tiles: int = 0  # a tile path's most accumulator tiles (0: accumulators in vector registers)
    tile_order: Callable[[tuple[int, int]], tuple] = most_rows  # ``dot_tile``'s preference among the tiles that fit

    def fits(self, isa: CpuIsa, rows: int, vectors: int) -> bool:
        if self.accumulator_tiles:
            return rows <= amx_dot.MAX_ROWS and vectors <= self.accumulator_tiles
        return rows * vectors + self.weight_registers * vectors + self.broadcast_registers <= isa.vector_registers


def packed_strip(vectors: int, dot: DotPath) -> int:
    """The vectors of a packed weight strip under a tile of ``vectors``: the most that divide it and read at most
    ``LINE_BYTES`` per K step (``DotPath.step_bytes``; 0: the whole tile), so a zmm tile of 2 vectors reads two
    one-line streams rather than one stream of two lines. Measured on Sapphire Rapids, FLASH logits, TVM alone,
    two pairs of back-to-back runs, median ms at T = 1/2/4/8/16: 8 x 2 zmm packed 2 wide 2.80/3.07/5.11/6.17/11.82
    and 2.67/2.75/4.98/6.49/11.80, packed 1 wide 2.58/2.70/3.53/5.81/11.33 and 2.59/2.75/3.88/5.92/11.31. A ymm
    vector reads 32 bytes, so the AVX2 tiles keep their strips."""
    if not dot.step_bytes:
        return vectors
    return max(v for v in range(1, vectors + 1) if vectors % v == 0 and (v == 1 or v * dot.step_bytes <= LINE_BYTES))


def dot_tile(isa: CpuIsa, columns: int, row_quantum: int, dot: DotPath, knobs: CpuGemm) -> tuple[int, int] | None:
    """``(register_rows, column_vectors)`` of a dot-product tile: rows dividing the kernel's row quantum, a strip
    dividing ``columns``, the step inside the register file (``DotPath.fits``); the knobs' ``dot_rows``/
    ``dot_vectors`` where set, else the first in the path's order (``DotPath.tile_order``: ``most_rows``, or
    ``shared_broadcasts``)."""
    fits = [(r, c) for r in (16, 8, 4, 2) if row_quantum % r == 0 for c in range(1, isa.vector_registers)
            if dot.fits(isa, r, c) and columns % (c * dot.lanes) == 0
            and knobs.dot_rows in (None, r) and knobs.dot_vectors in (None, c)]
    return max(fits, key=dot.tile_order) if fits else None


def bf16_dot_path(isa: CpuIsa) -> DotPath | None:
    """The BF16 pair dot on registers of this ISA: ``vdpbf16ps``, else its FMA form on 256/512-bit FMA vectors
    (its tiles in ``dot_tile_order``), else None."""
    if isa.bf16_dot:
        return DotPath(apply_bf16_dot, bf16_lanes(isa), step_bytes=4 * bf16_lanes(isa))  # lanes x a BF16 pair
    if isa.fma and isa.vector_bits in (256, 512):
        # one weight register per vector, not two: LLVM splits the odd and even halves from one load as each row
        # needs them (counting two left T = 2 with 4 accumulators: AVX2 FLASH logits 4.5-5.4 ms, against
        # 2.8-3.4 ms with 8)
        return DotPath(apply_bf16_dot, bf16_lanes(isa), weight_registers=1, broadcast_registers=2,
                       step_bytes=4 * bf16_lanes(isa),
                       tile_order=dot_tile_order(isa))
    return None


def int8_dot_path(isa: CpuIsa) -> DotPath | None:
    """The int8 dot on registers of this ISA (``vpmaddwd``, VNNI's ``vpdpwssd``; its tiles in
    ``dot_tile_order``), or None."""
    return None if isa.int8_dot is None else DotPath(apply_int8_dot, int8_lanes(isa), tile_order=dot_tile_order(isa))


def _dot_schedule(sch: s_tir.Schedule, block, io, knobs: CpuGemm, isa: CpuIsa) -> DotPath | None:
    """The dot-product schedule for this block on this ISA, or None to use FMAs on widened operands: the
    operands' dtype and the ISA's features decide, never the machine that builds. BF16 takes the pair dot
    (``vdpbf16ps``, or its FMA form on any FMA ISA of 256/512-bit vectors), int8 ``vpmaddwd``/``vpdpwssd``; either
    on AMX tiles where the target has them (``tile_dot``). (A shard that no whole vector divides also takes the
    FMA path: ``dot_tile`` is None.)"""
    if not (knobs.dot_products and knobs.pack_weight):
        return None
    operands = block_operands(sch, block, io)
    tiles = tile_dot(knobs, isa, operands)
    if tiles:  # one weight tile per strip and K step: 1 KiB
        return DotPath(functools.partial(apply_amx_dot, dot=tiles), amx_dot.LANES, step_bytes=LINE_BYTES,
                       accumulator_tiles=amx_dot.max_tiles())
    if operands == BF16_OPERANDS and (pair_dot := bf16_dot_path(isa)):
        return pair_dot
    if operands == ("int8", "int32") and (int8_dot := int8_dot_path(isa)):
        return int8_dot
    return None  # (also a block a pass changed, e.g. another accumulator type: the FMA path takes any)


def side_by_side(isa: CpuIsa, columns: int, rows: int, strip: int, dot: DotPath) -> int:
    """How many packed strips of ``strip`` columns a small-T tile of ``rows`` rows spans: decode sizes have too
    few rows for enough independent accumulators in one strip, so the tile takes neighbouring strips too (each a
    contiguous stream of the packed weight). The most strips, up to ``MAX_STREAMS`` vectors, that divide the
    columns and keep the step inside the register file (``DotPath.fits``)."""
    vectors = ceil_div(strip, dot.lanes)
    fits = [m for m in range(1, MAX_STREAMS // vectors + 1) if columns % (m * strip) == 0
            and dot.fits(isa, rows, m * vectors)]
    return max(fits, default=1)


def _fma_schedule(sch: s_tir.Schedule, b, io, knobs: CpuGemm, isa: CpuIsa, *, rows: int, tile: int,
                  strips: int = 1, pack: bool = False, sample: Sampler = fixed) -> None:
    """The FMA path of one GEMM block: ``rows`` register rows x ``strips`` packed strips of ``tile`` columns."""
    t, n, k = sch.get_loops(b)
    depth = int(sch.get(k).extent)
    kc, ki = sch.split(k, sample("k_chunk", k, [c for c in K_CHUNKS if depth % c == 0], knobs.k_chunk))
    no, *columns = sch.split(n, [None, tile] if strips == 1 else [None, strips, tile])
    row_extent = sch.get(t).extent  # static in a tuning workload (the 16-row tile), else blocks * rows
    row_extent = int(row_extent) if isinstance(row_extent, tirx.IntImm) else rows
    to, tr = sch.split(t, sample("register_rows", t, fitting_rows(isa, tile, row_extent), rows))
    sch.reorder(no, to, kc, ki, tr, *columns)
    if pack:
        pack_weight_columns(sch, b, io.weight, tile)
    if io.widen:
        widened = sch.cache_read(b, buffer_read_index(sch, b, io.activation), "global", consumer_blocks=[b])
        vectorized_rows(sch, widened, isa.fp32_lanes)
    acc = sch.cache_write(b, 0, knobs.accumulator)
    # unit loops kept: a 1-row tile has the same loop nest as any other, so a trace replays for every
    # sampled row count
    sch.reverse_compute_at(acc, to, preserve_unit_loops=True)
    if knobs.unroll:
        sch.unroll(tr)
    for strip in columns[:-1]:  # strips side by side
        sch.unroll(strip)
    sch.vectorize(columns[-1])
    tile_rows, tile_columns = sch.get_loops(acc)[-2:]
    sch.unroll(tile_rows)
    if strips > 1:
        strip, tile_columns = sch.split(tile_columns, [strips, tile])
        sch.unroll(strip)
    sch.vectorize(tile_columns)
    sch.parallel({"columns": no, "tokens": to}[knobs.parallel])
    sch.decompose_reduction(b, kc)


def cpu_gemm(sch: s_tir.Schedule, knobs: CpuGemm, isa: CpuIsa, sample: Sampler = fixed) -> None:
    """Register-blocked GEMM ``Y[t, n] += A[t, k] * W[n, k]`` on the trivial loops ``(t, n, k)``, ``t`` over
    the rows that run (a multiple of the register rows).

    Steps, per block: ``k-chunks`` (K split by ``k_chunk``, in order), ``column-strips`` (N split by the strip),
    ``register-rows`` (t split by the register rows), ``reorder`` (strip, row block, K, row, column),
    ``pack-weight`` (the strip contiguous per K step, lifted out of the per-call path), ``widen-activation``,
    ``register-accumulator`` (the tile in ``accumulator`` scope at the row block: ``local`` is a register tile,
    kept on the stack by ``passes.register_tiles`` for LLVM to promote to registers), ``unroll-rows``,
    ``vectorize-columns``, ``parallel`` (strips or row blocks). A block whose operands the ISA has a dot product
    for (BF16: ``vdpbf16ps`` on AVX512-BF16, its FMA form on other AVX2/AVX-512 targets; int8 on AVX2/AVX-512:
    ``vpmaddwd``, VNNI: ``vpdpwssd``) is tensorized onto it instead (``dot_tile``). ``sample`` may turn the
    register rows and the K chunk of the FMA path into MetaSchedule samples (a tuning space). ``inline`` blocks
    (a fused kernel's elementwise prologue/epilogue) are computed into their consumers first.

    A kernel with small-T variants (``token_rows.row_variants``) gets each variant's block the same way, with
    the variant's rows as register rows and as many neighbouring strips of the one packed weight as fit
    (``side_by_side``): the general block packs the weight, every variant reads that pack.
    """
    for name in knobs.inline:
        for b, _ in row_variant_blocks(sch, name):
            sch.compute_inline(b)
    for name, io in knobs.blocks.items():
        (b, _), *small = row_variant_blocks(sch, name)
        columns = int(sch.get(sch.get_loops(b)[1]).extent)
        rows, tile = register_tile(isa, columns, knobs)
        quantum = row_quantum(knobs, isa, columns, block_operands(sch, b, io))  # the kernel's (AMX: 16 rows)
        dot = _dot_schedule(sch, b, io, knobs, isa)
        tile_of_dots = dot and dot_tile(isa, columns, quantum, dot, knobs)
        if (knobs.dot_rows or knobs.dot_vectors) and not tile_of_dots:
            raise ValueError(f"{name}: no dot-product tile of {knobs.dot_rows or 'any'} rows x "
                             f"{knobs.dot_vectors or 'any'} vectors on {isa.name} for this block")
        if tile_of_dots:
            dot_rows, vectors = tile_of_dots
            strip = packed_strip(vectors, dot)
            dot.apply(sch, b, isa, register_rows=dot_rows, column_vectors=vectors, strip_vectors=strip)
            for variant, r in small:
                strips = side_by_side(isa, columns, r, vectors * dot.lanes, dot)
                dot.apply(sch, variant, isa, register_rows=r, column_vectors=strips * vectors, pack_vectors=strip)
            continue
        _fma_schedule(sch, b, io, knobs, isa, rows=rows, tile=tile, pack=knobs.pack_weight, sample=sample)
        for variant, r in small:
            strips = side_by_side(isa, columns, r, tile, DotPath(_fma_schedule, isa.fp32_lanes, 1, 1))
            _fma_schedule(sch, variant, io, knobs, isa, rows=r, tile=tile, strips=strips)
    for name in knobs.epilogue:
        for b, _ in row_variant_blocks(sch, name):
            vectorized_rows(sch, b, isa.fp32_lanes)


def batched_tile(isa: CpuIsa, rows: int, columns: int, knobs: CpuBatchedGemm) -> tuple[int, int]:
    """``(register_rows, column_vectors)`` of a batched GEMM's tile: the knobs', else the most rows (up to 8)
    dividing ``rows``, then the most vectors (up to 2) dividing ``columns``, inside the register file
    (accumulators, a weight vector each, a broadcast). ``column_vectors`` 0: ``columns`` holds no whole vector,
    the columns stay scalar."""
    lanes = isa.fp32_lanes
    vector_counts = [c for c in (2, 1) if columns % (c * lanes) == 0] or [0]
    fits = [(r, c) for r in ROW_QUANTA if rows % r == 0 for c in vector_counts
            if r * max(c, 1) + max(c, 1) + 1 <= isa.vector_registers
            and knobs.register_rows in (None, r) and knobs.column_vectors in (None, c)]
    if not fits:
        raise ValueError(f"no batched-GEMM tile of {knobs.register_rows or 'any'} rows x "
                         f"{knobs.column_vectors or 'any'} vectors fits {rows} rows x {columns} columns on {isa.name}")
    return max(fits, key=lambda rc: (rc[0] * max(rc[1], 1), rc[1]))


def cpu_batched_gemm(sch: s_tir.Schedule, knobs: CpuBatchedGemm, isa: CpuIsa) -> None:
    """Batched GEMM ``Y[b..., i, j] += A[b..., i, k] * B[b..., k, j]`` on loops ``(b..., i, j, k)`` (static i, j):
    ``inline`` blocks computed into their consumers first; ``batches`` (the batch loops fused), ``register-rows``
    and ``column-strips`` (``batched_tile``), ``reorder`` (batch, row block, strip, K, row, vector),
    ``register-accumulator`` (the tile ``local`` at the strip: ``passes.register_tiles``), ``unroll-rows``,
    ``vectorize-columns`` (B's row ``k`` is contiguous in ``j``: one vector load feeds every row's FMA),
    ``parallel`` (batches x row blocks), ``hoist-init``; epilogue blocks vectorised by rows. K sums in order."""
    for name in knobs.inline:
        sch.compute_inline(sch.get_sblock(name))
    b = sch.get_sblock(knobs.block)
    *batch, i, j, k = sch.get_loops(b)
    rows, vectors = batched_tile(isa, int(sch.get(i).extent), int(sch.get(j).extent), knobs)
    lanes = isa.fp32_lanes
    bo = sch.fuse(*batch) if len(batch) > 1 else batch[0]
    io, ii = sch.split(i, [None, rows])
    jo, *strip = sch.split(j, [None, vectors, lanes]) if vectors else sch.split(j, [None, 1])
    sch.reorder(bo, io, jo, k, ii, *strip)
    acc = sch.cache_write(b, 0, "local")
    sch.reverse_compute_at(acc, jo)
    sch.unroll(ii)
    if vectors:
        sch.unroll(strip[0])
        sch.vectorize(strip[1])
        acc_rows, acc_columns = sch.get_loops(acc)[-2:]
        sch.unroll(acc_rows)
        sch.vectorize(sch.split(acc_columns, [None, lanes])[1])
    sch.parallel(sch.fuse(bo, io))
    sch.decompose_reduction(b, k)
    for name in knobs.epilogue:
        vectorized_rows(sch, sch.get_sblock(name), lanes)


def cpu_rows(sch: s_tir.Schedule, knobs: CpuRows, isa: CpuIsa, sample: Sampler = fixed) -> None:
    """Row-wise kernels (norms, quantiser, pad/unpad): rows in parallel (``parallel``: ``rows`` or ``none``),
    columns vectorised (``vector_width``, default the ISA's FP32 lanes; a sampled knob); per-row producers
    (``compute_at_row``, consumer first) move under the row loop so a row is one pass in cache;
    ``parallel_blocks`` get their row loop parallelised too. Two ways to break a row's reduction into independent
    chains instead of one serial chain of adds, each keeping the result bitwise:

    - ``interleaved_chains`` (``interleave-chains``): a block that reduces many outputs of a row at once (the
      norms' 32 chunk sums of 128) runs ``CHAINS`` of them side by side, each still in its own order (FLASH
      projection, T = 16: ``rms_norm_smooth`` 30 -> 12 us a call);
    - ``lane_reductions`` (``lane-partials``): a reduction whose order cannot change its result (the quantiser's
      amax) kept as one partial result per lane (``rfactor``; the partials block, ``<name>_rf``, is what runs in
      parallel), the lanes vectorised, then reduced across the lanes.
    """
    b = sch.get_sblock(knobs.row_block)
    for producer in knobs.compute_at_row:
        sch.compute_at(sch.get_sblock(producer), sch.get_loops(b)[0])
    lanes = knobs.vector_width or isa.fp32_lanes
    interleaved = [_interleaved_chains(sch, name) for name in knobs.interleaved_chains]
    partials = {name: _lane_partials(sch, name, lanes) for name in knobs.lane_reductions}
    vectorized_rows(sch, b, lambda loop: sample("vector_width", loop, [max(lanes // 2, 1), lanes, 2 * lanes], lanes),
                     parallel=knobs.parallel == "rows")
    for other in knobs.parallel_blocks:
        sch.parallel(sch.get_loops(partials.get(other) or sch.get_sblock(other))[0])
    # TVM parallelises a loop only over whole reductions, so each one's init leaves its reduction loop last
    for block, reduction in interleaved:
        sch.decompose_reduction(block, reduction)
        sch.unroll(sch.get_loops(block)[-1])
    for block in partials.values():
        sch.vectorize(sch.get_loops(block)[-1])


def _interleaved_chains(sch: s_tir.Schedule, name: str):
    """Block ``name`` (loops ``..., c, k``: outputs ``c`` of a row, each reduced over ``k``) with ``CHAINS`` of
    its outputs innermost (``c / CHAINS, k, CHAINS``): that many reductions in flight, each over ``k`` in order.
    Returns the block and its reduction loop."""
    block = sch.get_sblock(name)
    *_, c, k = sch.get_loops(block)
    _, chains = sch.split(c, [None, math.gcd(int(sch.get(c).extent), CHAINS)])
    sch.reorder(k, chains)
    return block, k


def _lane_partials(sch: s_tir.Schedule, name: str, lanes: int):
    """Block ``name``'s row reduction (loops ``t, k``) split into ``lanes`` partial results per row: the
    partials block (``<name>_rf``, returned) over ``t, k / lanes, lanes``, then ``name`` over the lanes."""
    *_, k = sch.get_loops(sch.get_sblock(name))
    _, lane = sch.split(k, [None, lanes])
    return sch.rfactor(lane, factor_axis=1)


def cpu_lm_head(sch: s_tir.Schedule, knobs: CpuLmHead, isa: CpuIsa) -> None:
    """The TP LM head (``lm_head_tp``): an owner's selected rows innermost, so they form one vector register.

    Steps: ``rows-innermost`` (the selected rows stored ``[owner, k, row]``), ``vocab-outer`` (loops vocab,
    owner, K, row), ``register-accumulator`` (the rows' partial logits in a local tile, written once),
    ``vectorize-rows``, ``parallel-vocab``, ``hoist-init``. Every row still sums K in chunk order, so the
    logits are bitwise those of the unscheduled kernel.
    """
    sch.transform_layout(sch.get_sblock(knobs.select_block), ("write", 0), lambda o, j, k: (o, k, j))
    logits = sch.get_sblock(knobs.logits_block)
    v, o, j, k = sch.get_loops(logits)
    sch.reorder(v, o, k, j)
    acc = sch.cache_write(logits, 0, "local")
    sch.reverse_compute_at(acc, o)
    sch.vectorize(j)
    sch.vectorize(sch.get_loops(acc)[-1])
    sch.parallel(v)
    sch.decompose_reduction(logits, k)


def cpu_generic(sch: s_tir.Schedule, knobs: CpuGeneric, isa: CpuIsa) -> None:
    """Kernels matched by pattern (``patterns.py``: row-wise reductions, elementwise chains, copies, pads,
    transposes): ``inline`` blocks computed into their consumers, then each ``vectorize`` block's innermost
    (spatial) loop split by the vector width (``vector_width`` or the ISA's FP32 lanes, narrowed to a divisor of
    the loop) and vectorised, and each ``parallel`` block's outer loop run in parallel. Reductions keep their
    order (the norms' chunked sums are part of the contract)."""
    for name in knobs.inline:
        sch.compute_inline(sch.get_sblock(name))
    lanes = knobs.vector_width or isa.fp32_lanes
    for name in knobs.vectorize:
        innermost = sch.get_loops(sch.get_sblock(name))[-1]
        width = math.gcd(int(sch.get(innermost).extent), lanes)
        if width > 1:
            _, inner = sch.split(innermost, [None, width])
            sch.vectorize(inner)
    for name in knobs.parallel:
        sch.parallel(sch.get_loops(sch.get_sblock(name))[0])
