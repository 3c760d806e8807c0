"""GPU (CUDA) schedule rules: thread bindings for the hand kernels, and TVM's dlight rules for the rest.
A GPU kernel cannot lower unbound, so every kernel gets one or the other."""

from __future__ import annotations

import math

import tvm
from tvm import s_tir, tirx
from tvm.target import Target

from ..contract.presets import TOKEN_TILE
from ..passes.kernel_blocks import kernel_blocks
from ..support.errors import last_line
from .gpu_dot import DP4A_LOCAL, register_dp4a
from .knobs import GpuFlat, GpuGemm, GpuGemv, GpuRows
from .steps import buffer_read_index, fitting_column_tile, fitting_k_vector
from .token_rows import row_variant_blocks

WARP = 32  # lanes of a warp: the K split of the GEMV, reduced by shuffles


def _bind_flat(sch: s_tir.Schedule, block, threads: int) -> None:
    """Every loop of ``block`` fused, then split over blocks x ``threads`` (elementwise kernels, copies)."""
    bx, tx = sch.split(sch.fuse(*sch.get_loops(block)), [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")


def _loops_below(sch: s_tir.Schedule, block, anchor, extents: list[int]) -> list:
    """The loops of ``block`` under ``anchor``, one per expected extent; the unit loops ``compute_at`` drops
    (a K of one step, a column tile of 1) come back via ``add_unit_loop``, so callers unpack loops by role."""
    loops = sch.get_loops(block)
    present = iter(loops[[sch.get(lp).same_as(sch.get(anchor)) for lp in loops].index(True) + 1:])
    out = [None if ext == 1 else next(present) for ext in extents]
    for i, lp in enumerate(out):
        if lp is None:
            below = next((x for x in out[i + 1:] if x is not None), block)
            out[i] = sch.add_unit_loop(below)
    return out


def gpu_gemm(sch: s_tir.Schedule, knobs: GpuGemm, _isa=None) -> None:
    """Skinny GEMM ``Y[t, n] = sum_k A[t, k] W[n, k]`` (16 token rows, long K): a thread block per token tile x
    ``column_tile`` columns; ``threadIdx.y`` = the token row, ``threadIdx.x`` = ``k_threads`` lanes splitting K.
    Each lane keeps ``column_tile`` partial sums in registers (rfactor), loads ``vector_width`` K elements of its
    activation row and of each weight row per step (16-byte loads, coalesced along K across the warp), widens
    them in the inner loop, and the lanes of a warp finish with a shuffle reduction. With ``stage_weight`` =
    ``shared``, each K chunk of the weight tile is staged once in shared memory for the 16 row-warps.

    Knobs: ``column_tile``, ``k_threads``, ``vector_width``, ``stage_weight``, ``blocks`` (block -> activation,
    weight), ``epilogue`` (elementwise blocks after the GEMMs), ``epilogue_threads``.
    """
    lanes = knobs.k_threads
    for name, io in knobs.blocks.items():
        b = sch.get_sblock(name)
        t, n, k = sch.get_loops(b)
        tt, ti = sch.split(t, [None, TOKEN_TILE])  # the row loop runs a multiple of 16 rows on GPUs
        cols = fitting_column_tile(sch, n, knobs.column_tile)
        vec = fitting_k_vector(int(sch.get(k).extent), lanes, knobs.vector_width)
        k_steps = int(sch.get(k).extent) // (lanes * vec)
        ko, kt, kv = sch.split(k, [None, lanes, vec])
        no, nc = sch.split(n, [None, cols])
        sch.reorder(tt, no, ti, ko, kt, kv, nc)
        rf = sch.rfactor(kt, factor_axis=0)
        tt, no, ti, kt, nc = sch.get_loops(b)
        sch.reorder(nc, kt)
        sch.bind(tt, "blockIdx.y")
        sch.bind(no, "blockIdx.x")
        sch.bind(ti, "threadIdx.y")
        sch.bind(kt, "threadIdx.x")  # the final sum over lanes: a warp shuffle reduction
        sch.set_scope(rf, 0, "local")
        sch.compute_at(rf, ti)
        kt, nc, ko, kv = _loops_below(sch, rf, ti, [lanes, cols, k_steps, vec])
        sch.bind(kt, "threadIdx.x")
        sch.reorder(ko, nc, kv)
        if knobs.stage_weight == "shared":
            ws = sch.cache_read(rf, buffer_read_index(sch, rf, io.weight), "shared")
            sch.compute_at(ws, ko, preserve_unit_loops=True)
            _, ty, tx, v = sch.split(sch.fuse(*sch.get_loops(ws)[-2:]), [None, TOKEN_TILE, lanes, max(vec // 2, 1)])
            sch.bind(ty, "threadIdx.y")
            sch.bind(tx, "threadIdx.x")
            sch.vectorize(v)
        weight = io.weight + ("_shared" if knobs.stage_weight == "shared" else "")
        wl = sch.cache_read(rf, buffer_read_index(sch, rf, weight), "local")
        sch.compute_at(wl, nc)
        sch.vectorize(sch.get_loops(wl)[-1])
        xl = sch.cache_read(rf, buffer_read_index(sch, rf, io.activation), "local")
        sch.compute_at(xl, ko, preserve_unit_loops=True)
        sch.vectorize(sch.get_loops(xl)[-1])
        sch.unroll(kv)
        sch.decompose_reduction(rf, ko)
    for name in knobs.epilogue:
        _bind_flat(sch, sch.get_sblock(name), knobs.epilogue_threads)


def gpu_gemv(sch: s_tir.Schedule, knobs: GpuGemv, _isa=None) -> None:
    """Decode GEMMs ``Y[t, n] = sum_k A[t, k] W[n, k]`` that stream the weight once at the memory's pace.

    A warp owns ``warp_columns`` output columns (``warps`` warps a block, blocks over the columns); its 32 lanes
    split K, each loading ``vector_width`` elements (16 bytes) of every owned weight row and of every token row
    per step: a warp's loads of a weight row are 512 contiguous bytes. Each lane keeps rows x columns partial
    sums in registers and the warp reduces them with shuffles at the end: no shared memory, no barrier, so
    every warp streams independently. Each small-T variant (``token_rows.row_variants``: a kernel of its own,
    picked on the bound T) runs its real rows only; the general kernel runs tiles of 16 rows, one per
    ``blockIdx.y``. ``dot = dp4a``: int8 blocks multiply 4 pairs a lane per instruction into int32.

    Knobs: ``blocks``, ``warp_columns``, ``warps``, ``vector_width``, ``row_variants``, ``k_unroll``, ``dot``,
    ``fuse`` (the GEMMs and their one epilogue block in one kernel: ``_fused_gemvs``), ``epilogue`` (elementwise
    blocks after the GEMMs; flat kernels unless fused), ``epilogue_threads``.
    """
    if knobs.fuse:
        _fused_gemvs(sch, knobs)
        return
    for name, io in knobs.blocks.items():
        for block, rows in row_variant_blocks(sch, name):
            _gemv_block(sch, block, io, knobs, rows)
    for name in knobs.epilogue:
        for block, _ in row_variant_blocks(sch, name):
            _bind_flat(sch, block, knobs.epilogue_threads)


def _fused_gemvs(sch: s_tir.Schedule, knobs: GpuGemv) -> None:
    """``fuse``: the GEMMs and their one epilogue block in one kernel per row count. The epilogue's loops give
    the kernel its blocks and warps (a warp per ``warp_columns`` output columns); each GEMM's lane sums and
    their shuffle reduction are computed under the warp first, the sums kept in the warp's registers (every
    lane holds them after the shuffles), and every lane then runs the epilogue's rows x columns from them."""
    if len(knobs.epilogue) != 1:
        raise ValueError(f"fuse takes exactly one epilogue block, got {list(knobs.epilogue)}")
    for i, (epilogue, rows) in enumerate(row_variant_blocks(sch, knobs.epilogue[0])):
        t, n = sch.get_loops(epilogue)
        warp, ti, nc = _warp_tiles(sch, t, n, rows, knobs)
        for name, io in knobs.blocks.items():
            gemm = row_variant_blocks(sch, name)[i][0]
            # at the root: rfactor takes a block alone in its loop nest; the lanes' partial sums and their sum
            # then move under the warp
            rf = sch.rfactor(_split_k(sch, gemm, knobs)[1], factor_axis=0)
            sch.set_scope(gemm, 0, "local")
            sch.compute_at(gemm, warp, preserve_unit_loops=True)
            sch.compute_at(rf, warp, preserve_unit_loops=True)
            kt, ti_rf, nc_rf, ko, kv = sch.get_loops(rf)[-5:]
            sch.reorder(kt, ko, ti_rf, nc_rf, kv)
            _gemv_lanes(sch, rf, gemm, io, knobs, kt, ko, ti_rf, nc_rf, kv)
        sch.unroll(ti)  # every lane runs the epilogue on the warp's sums in its registers (same value, one
        sch.unroll(nc)  # store transaction a warp); lanes split over rows x columns index them dynamically


def _warp_tiles(sch: s_tir.Schedule, t, n, rows: int | None, knobs: GpuGemv):
    """The loops ``t`` (token rows) and ``n`` (output columns) as blocks x warps of ``warp_columns`` columns
    (``blockIdx.x``, ``threadIdx.y``), and 16-row tiles over ``blockIdx.y`` for the general kernel (``rows``
    None). Returns ``(warp, rows loop, columns loop)``, the last two the warp's own, reordered under it."""
    block_columns = fitting_column_tile(sch, n, knobs.warp_columns * knobs.warps)
    columns = math.gcd(block_columns, knobs.warp_columns)
    bx, ty, nc = sch.split(n, [None, block_columns // columns, columns])
    tiles, ti = ([], t) if rows is not None else ([(s := sch.split(t, [None, TOKEN_TILE]))[0]], s[1])
    sch.reorder(bx, *tiles, ty, ti, nc)
    sch.bind(bx, "blockIdx.x")
    if tiles:
        sch.bind(tiles[0], "blockIdx.y")
    sch.bind(ty, "threadIdx.y")
    return ty, ti, nc


def _split_k(sch: s_tir.Schedule, b, knobs: GpuGemv):
    """The K loop of GEMM block ``b`` as ``(ko, kt, kv)``: steps x the 32 lanes x ``vector_width`` elements a
    load (a width that divides K exactly)."""
    *_, k = sch.get_loops(b)
    depth = int(sch.get(k).extent)
    return sch.split(k, [None, WARP, fitting_k_vector(depth, WARP, knobs.vector_width)])


def _gemv_block(sch: s_tir.Schedule, b, io, knobs: GpuGemv, rows: int | None) -> None:
    """``gpu_gemv`` on one GEMM block, a kernel of its own: ``rows`` its static token rows (a small-T variant),
    None for the general block (16-row tiles over ``blockIdx.y``)."""
    ko, kt, kv = _split_k(sch, b, knobs)
    t, n = sch.get_loops(b)[:2]
    _, ti, nc = _warp_tiles(sch, t, n, rows, knobs)
    sch.reorder(kt, ko, ti, nc, kv)
    rf = sch.rfactor(kt, factor_axis=0)  # rf: the lanes' partial sums (a copy of the loops); b: their sum
    *_, ty, kt, ko, ti, nc, kv = sch.get_loops(rf)
    sch.reverse_compute_at(b, ty, preserve_unit_loops=True)
    _gemv_lanes(sch, rf, b, io, knobs, kt, ko, ti, nc, kv)


def _gemv_lanes(sch: s_tir.Schedule, rf, b, io, knobs: GpuGemv, kt, ko, ti, nc, kv) -> None:
    """The lanes of a warp streaming K (``rf`` under ``kt, ko, ti, nc, kv``), then the shuffle sum ``b`` (under
    the warp, loops ``kt, rows, columns``)."""
    sch.bind(kt, "threadIdx.x")
    sch.set_scope(rf, 0, "local")  # rows x columns partial sums per lane: registers (the loops are unrolled)
    k_steps = int(sch.get(ko).extent)
    unroll = math.gcd(k_steps, knobs.k_unroll)
    k_outer, step = sch.split(ko, [None, unroll]) if unroll > 1 else (ko, ko)
    if unroll > 1:
        sch.unroll(step)  # several K steps' loads in flight
    # every load of a K step issued before its products: the owned weight rows, then the token rows
    for buffer in (io.weight, io.activation):
        cached = sch.cache_read(rf, buffer_read_index(sch, rf, buffer), "local")
        sch.compute_at(cached, step, preserve_unit_loops=True)
        sch.vectorize(sch.get_loops(cached)[-1])
    init = sch.decompose_reduction(rf, k_outer)
    for loop in [*sch.get_loops(init)[-2:], ti, nc]:
        sch.unroll(loop)
    # the sum over the lanes under the warp: a shuffle reduction per (row, column)
    kt, ri, ci = sch.get_loops(b)[-3:]
    sch.reorder(ri, ci, kt)
    sch.bind(kt, "threadIdx.x")
    if knobs.dot == "dp4a":  # last: tensorize replaces the block it covers
        register_dp4a()
        sch.tensorize(sch.split(kv, [None, 4])[1], DP4A_LOCAL)
    else:
        sch.unroll(kv)


def _cross_thread_reduce(sch: s_tir.Schedule, block, threads: int) -> None:
    """Split ``block``'s innermost (reduction) loop over ``threads`` lanes bound to ``threadIdx.x``: each lane
    reduces its strided part, then TVM's cross-thread reduction (warp shuffles, shared memory across warps)."""
    _, lane = sch.split(sch.get_loops(block)[-1], [None, threads])
    sch.bind(lane, "threadIdx.x")


def gpu_rows(sch: s_tir.Schedule, knobs: GpuRows, _isa=None) -> None:
    """Row-wise kernels: a thread block per row, ``threads`` lanes over its columns.

    Knobs: ``row_block`` (the row's final, elementwise block), ``compute_at_row`` (producers moved under the
    row, consumer first; their buffers become per-thread registers, every lane holding the row's values),
    ``cross_thread`` (those producers whose reduction the lanes share), ``own_kernel`` (blocks that cannot
    move, e.g. ones writing an output: each its own launch, reductions across lanes, the rest flat), ``threads``.
    """
    threads = knobs.threads
    b = sch.get_sblock(knobs.row_block)
    for name in knobs.compute_at_row:
        producer = sch.get_sblock(name)
        sch.compute_at(producer, sch.get_loops(b)[0])
        sch.set_scope(producer, 0, "local")
        if name in knobs.cross_thread:
            _cross_thread_reduce(sch, producer, threads)
    row, col = sch.get_loops(b)[0], sch.get_loops(b)[-1]
    _, lane = sch.split(col, [None, threads])
    sch.bind(row, "blockIdx.x")
    sch.bind(lane, "threadIdx.x")
    for name in knobs.own_kernel:
        blk = sch.get_sblock(name)
        loops = sch.get_loops(blk)
        if name in knobs.cross_thread:
            sch.bind(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0], "blockIdx.x")
            _cross_thread_reduce(sch, blk, threads)
        else:
            _bind_flat(sch, blk, threads)


def gpu_flat(sch: s_tir.Schedule, knobs: GpuFlat, _isa=None) -> None:
    """Elementwise kernels (pad/unpad copies): all loops fused over blocks x ``threads``."""
    for name in knobs.blocks:
        _bind_flat(sch, sch.get_sblock(name), knobs.threads)


def dlight_rules(decode_gemm: bool = False, int8: bool = False) -> list:
    """dlight's GPU rules in MLC-LLM's order. ``decode_gemm``: one of the hand GEMM kernels, its rows cut to the
    token count T, which ``LowBatchGEMV`` (a symbolic row count of up to a few rows) takes first. Elsewhere it is
    left out: on the Relax frontend's legalised BF16 matmul it schedules IR that TVM 0.27 then fails to lower (a
    uint16 buffer stored a bfloat16 value). ``int8``: a kernel with an int8 x int8 -> int32 reduction
    (``has_int8_gemm``), which ``Matmul`` would put on tensor cores: TVM 0.27 cannot lower that schedule
    (``InjectSoftwarePipeline``: "Check failed: (it != fragment_info_.end())"), and trying it first imports every
    tensor intrinsic TVM ships (45 s on the Relax frontend's first CUDA build of the projection), so it is left
    out there."""
    from tvm.s_tir import dlight as dl

    return [*([dl.gpu.LowBatchGEMV()] if decode_gemm else []), *([] if int8 else [dl.gpu.Matmul()]),
            dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]


def has_int8_gemm(func: tirx.PrimFunc) -> bool:
    """Whether a block of ``func`` reduces into an int32 buffer from int8 ones (a W8A8 GEMM)."""
    return any(b.init is not None and {w.source.dtype for w in b.writes} == {"int32"}
               and "int8" in {r.source.dtype for r in b.reads} for b in kernel_blocks(func))


def apply_dlight(func: tirx.PrimFunc, target: Target, decode_gemm: bool = False) -> tuple[s_tir.Schedule, str] | None:
    """The first dlight rule whose schedule of ``func`` lowers (as ``ApplyDefaultSchedule`` picks, but a rule
    whose schedule TVM then fails to lower is passed over) and its name, or None. The name says which rules were
    passed over and why (``dlight_rules`` leaves out the rules known not to lower)."""
    passed_over = []
    for rule in dlight_rules(decode_gemm, has_int8_gemm(func)):
        try:
            space = rule.apply(func, target, False)
        except Exception:  # a rule that crashes on a kernel is one that does not apply to it
            continue
        if space is None:
            continue
        sch = space[0] if isinstance(space, list) else space
        failure = _lowering_failure(sch, target)
        if failure is None:
            skipped = "".join(f" ({name}'s schedule does not lower: {why})" for name, why in passed_over)
            return sch, type(rule).__name__ + skipped
        passed_over.append((type(rule).__name__, failure))
    return None


def _lowering_failure(sch: s_tir.Schedule, target: Target) -> str | None:
    """The last line of the error TVM's TIR lowering (the ``s_tir`` pipeline's first stage, a few ms a kernel)
    raises on a scheduled kernel, or None. In a context of its own: the build's instruments (dumps, pass clock)
    must not see this trial."""
    func = sch.mod["main"]
    trial = tvm.IRModule({"main": func.with_attr("target", target).with_attr("global_symbol", "main")})
    try:
        with tvm.transform.PassContext(opt_level=3):
            tvm.tirx.get_tir_pipeline("s_tir")[0](trial)
    except Exception as e:
        return last_line(e)
    return None
