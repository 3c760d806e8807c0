"""TODO docstring for schedule/cpu_rules"""

from __future__ import annotations

from tvm import s_tir
from tvm.target import Target

from ..schedule.steps import _column_tile, _pack_weight, _read_index, _vectorized_rows
from ..spec.presets import TOKEN_TILE


def cpu_gemm(sch: s_tir.Schedule, knobs: dict, _target: Target) -> None:
    """Register-blocked GEMM ``Y[t, n] += A[t, k] * W[n, k]`` on ``(token tile, n, k chunk, k)`` loops.

    Knobs: ``column_tile``, ``register_rows``, ``k_chunk``, ``token_tile`` (must be 16), ``parallel``
    (``columns`` or ``tokens``), ``unroll`` (the register rows), ``accumulator`` (cache scope of the register
    tile), ``pack_weight``, ``vector_width`` (of copies and epilogues), ``blocks`` (block -> its activation
    and weight buffer, ``widen``), ``epilogue`` (row-wise blocks after the GEMMs).

    Per column strip of ``column_tile`` (= one vector of FP32 lanes) and ``register_rows`` token rows, the
    accumulator tile stays in registers; K streams in ``k_chunk`` order; the weight strip is column-blocked
    (packed once) so each K step is one contiguous vector load, widened in the inner loop; activations
    listed in ``widen`` are copied once per call into a kernel-local buffer (BF16 ones become FP32 there).
    """
    rows, chunk = knobs["register_rows"], knobs["k_chunk"]
    if knobs.get("token_tile", TOKEN_TILE) != TOKEN_TILE:
        raise ValueError(f"token_tile must be {TOKEN_TILE}: the kernels are written on that tile")
    for name, io in knobs["blocks"].items():
        b = sch.get_sblock(name)
        tt, ti, n, kc, ki = sch.get_loops(b)
        tile = _column_tile(sch, n, knobs["column_tile"])
        kc, ki = sch.split(sch.fuse(kc, ki), [None, chunk])
        no, ni = sch.split(n, [None, tile])
        to, tr = sch.split(ti, [None, rows])
        sch.reorder(no, tt, to, kc, ki, tr, ni)
        if knobs.get("pack_weight"):
            _pack_weight(sch, b, io["weight"], tile)
        if io.get("widen"):
            widened = sch.cache_read(b, _read_index(sch, b, io["activation"]), "global")
            _vectorized_rows(sch, widened, knobs["vector_width"])
        acc = sch.cache_write(b, 0, knobs.get("accumulator", "global"))
        sch.reverse_compute_at(acc, to)
        if knobs["unroll"]:
            sch.unroll(tr)
        sch.vectorize(ni)
        acc_loops = sch.get_loops(acc)
        sch.unroll(acc_loops[-2])
        sch.vectorize(acc_loops[-1])
        sch.parallel({"columns": no, "tokens": tt}[knobs["parallel"]])
        sch.decompose_reduction(b, kc)
    for name in knobs.get("epilogue", []):
        _vectorized_rows(sch, sch.get_sblock(name), knobs["vector_width"])


def cpu_rows(sch: s_tir.Schedule, knobs: dict, _target: Target) -> None:
    """Row-wise kernels (norms, quantiser, pad/unpad): rows in parallel (``parallel``: ``rows`` or ``none``),
    columns vectorised (``vector_width``); per-row producers (``compute_at_row``, consumer first) move under the
    row loop so a row is one pass in cache; ``parallel_blocks`` get their row loop parallelised too."""
    b = sch.get_sblock(knobs["row_block"])
    for producer in knobs.get("compute_at_row", []):
        sch.compute_at(sch.get_sblock(producer), sch.get_loops(b)[0])
    _vectorized_rows(sch, b, knobs["vector_width"], parallel=knobs["parallel"] == "rows")
    for other in knobs.get("parallel_blocks", []):
        sch.parallel(sch.get_loops(sch.get_sblock(other))[0])
