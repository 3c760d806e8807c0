"""Schedule steps the CPU and GPU rules share: finding a read buffer, column tiles, weight packing."""

from __future__ import annotations

import math

from tvm import s_tir
from tvm.tirx import IndexMap

PREPACK_ANNOTATION = "meta_schedule.layout_rewrite_preproc"


def _read_index(sch: s_tir.Schedule, block, buffer_name: str) -> int:
    for i, region in enumerate(sch.get(block).reads):
        if region.source.name == buffer_name:
            return i
    raise ValueError(f"block {sch.get(block).name_hint} does not read a buffer named {buffer_name!r}")


def _column_blocked(tile: int) -> IndexMap:
    """``[N, K] -> [N / tile, K, tile]``: one contiguous ``tile``-wide column strip per K step."""
    return IndexMap.from_func(lambda n, k: (n // tile, k, n % tile), index_dtype="int32")


def _column_tile(sch: s_tir.Schedule, columns, tile: int) -> int:
    """The column tile actually used: the largest divisor of the column count that divides ``tile`` (a vocab
    shard of 1000 gets 8), so strips and the packed layout never need padding or bounds checks."""
    return math.gcd(int(sch.get(columns).extent), tile)


def _pack_weight(sch: s_tir.Schedule, block, weight: str, tile: int) -> None:
    """Column-block a weight in a preprocess block that the pipeline lifts out of the per-call path."""
    packed = sch.cache_read(block, _read_index(sch, block, weight), "global")
    sch.transform_layout(packed, ("write", 0), _column_blocked(tile))
    sch.annotate(packed, PREPACK_ANNOTATION, 1)  # 1, not True: the trace prints booleans as 1


def _vectorized_rows(sch: s_tir.Schedule, block, vector_width: int, parallel: bool = True) -> None:
    """Rows in parallel, the innermost (column) loop split by the vector width and vectorised."""
    loops = sch.get_loops(block)
    if len(loops) > 1:
        _, inner = sch.split(loops[-1], [None, vector_width])
        sch.vectorize(inner)
    if parallel:
        sch.parallel(loops[0])
