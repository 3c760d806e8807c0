"""Schedule steps the CPU and GPU rules share: finding a read buffer, column tiles, weight packing."""

from __future__ import annotations

import math

import tvm
from tvm import s_tir
from tvm.tirx import IndexMap

from ..passes.pipeline import PREPACK_ANNOTATION
from .token_rows import outermost_reader


def fresh_copy(node):
    """A deep copy of a PrimFunc or IRModule (a JSON round trip): ``s_tir.Schedule`` edits IR nodes in place, and
    kernels are shared (cached factories, a module and its tuning workload), so every schedule works on a copy."""
    return tvm.ir.load_json(tvm.ir.save_json(node))


def buffer_read_index(sch: s_tir.Schedule, block, buffer_name: str) -> int:
    for i, region in enumerate(sch.get(block).reads):
        if region.source.name == buffer_name:
            return i
    raise ValueError(f"block {sch.get(block).name_hint} does not read a buffer named {buffer_name!r}")


def weight_k_major(sch: s_tir.Schedule, block, read_index: int) -> bool:
    """Whether a GEMM block (iterators ``t, n, k``) reads this weight as ``W[k, n]`` (a Relax ``matmul`` of a
    transposed weight) rather than ``W[n, k]`` (the hand kernels): packing maps either layout to the same one."""
    stmt = sch.get(block)
    return stmt.reads[read_index].region[0].min.same_as(stmt.iter_vars[2].var)


def _column_blocked(tile: int, k_major: bool = False) -> IndexMap:
    """``[N, K] -> [N / tile, K, tile]`` (or from ``[K, N]``): one contiguous ``tile``-wide column strip per K
    step."""
    if k_major:
        return IndexMap.from_func(lambda k, n: (n // tile, k, n % tile), index_dtype="int32")
    return IndexMap.from_func(lambda n, k: (n // tile, k, n % tile), index_dtype="int32")


def fitting_column_tile(sch: s_tir.Schedule, columns, tile: int) -> int:
    """The column tile actually used: the largest divisor of the column count that divides ``tile`` (a vocab
    shard of 1000 gets 8), so strips and the packed layout never need padding or bounds checks."""
    return math.gcd(int(sch.get(columns).extent), tile)


def fitting_k_vector(k: int, lanes: int, width: int) -> int:
    """The K elements each of ``lanes`` threads loads per step: the largest divisor of ``width`` that makes
    ``lanes * vector`` divide ``K``, so the K split is exact (a predicated K split under the GPU GEMM's rfactor
    and shared staging computed wrong sums on an H200: tiny's K = 256 with 32 x 16 int8 lanes)."""
    if k % lanes:
        raise ValueError(f"K = {k} is not a multiple of the {lanes} K-lanes (k_threads) of the GPU GEMM")
    return math.gcd(k // lanes, width)


def pack_weight_columns(sch: s_tir.Schedule, block, weight: str, tile: int) -> None:
    """Column-block a weight in a preprocess block that the pipeline lifts out of the per-call path."""
    index = buffer_read_index(sch, block, weight)
    k_major = weight_k_major(sch, block, index)
    # once, at the root, for every block reading the weight (a kernel's small-T variants too)
    packed = sch.cache_read(outermost_reader(sch, block), sch.get(block).reads[index].source, "global")
    sch.transform_layout(packed, ("write", 0), _column_blocked(tile, k_major))
    sch.annotate(packed, PREPACK_ANNOTATION, 1)  # 1, not True: the trace prints booleans as 1


def vectorized_rows(sch: s_tir.Schedule, block, vector_width, parallel: bool = True) -> None:
    """Rows in parallel, the innermost (column) loop split by the vector width and vectorised. ``vector_width``:
    lanes, or a function of the column loop giving its split factors (a sampled width)."""
    loops = sch.get_loops(block)
    if len(loops) > 1:
        factors = vector_width(loops[-1]) if callable(vector_width) else [None, vector_width]
        _, inner = sch.split(loops[-1], factors)
        sch.vectorize(inner)
    if parallel:
        sch.parallel(loops[0])
