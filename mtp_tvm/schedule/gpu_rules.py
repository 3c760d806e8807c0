"""GPU (CUDA) schedule rules: thread bindings for the hand kernels, and TVM's dlight rules for the rest.
A GPU kernel cannot lower unbound, so every kernel gets one or the other."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.target import Target

from ..contract.presets import TOKEN_TILE
from .knobs import GpuFlat, GpuGemm, GpuRows
from .steps import buffer_read_index, fitting_column_tile, fitting_k_vector


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


def dlight_rules() -> list:
    from tvm.s_tir import dlight as dl

    return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]


def apply_dlight(func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
    """The first dlight rule that schedules ``func`` (as ``ApplyDefaultSchedule`` does), or None."""
    for rule in dlight_rules():
        try:
            space = rule.apply(func, target, False)
        except Exception:  # a rule that crashes on a kernel is one that does not apply to it
            continue
        if space is None:
            continue
        return space[0] if isinstance(space, list) else space
    return None
