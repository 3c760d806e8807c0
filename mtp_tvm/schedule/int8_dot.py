"""Exact INT8 x INT8 -> INT32 GEMM on x86 through the 16-bit multiply-add instructions.

``vpmaddwd`` multiplies int16 pairs and adds each pair into one int32 lane (``a0*b0 + a1*b1``); with int8
inputs neither the products nor the pair sum can overflow, so the GEMM is bit-exact in any K order. LLVM never
forms it from plain TIR (it widens to int32 and uses ``vpmulld``), so the GEMM block is tensorized onto it:
one intrinsic is one row x one vector of int32 lanes x one K pair. ``vpmaddubsw`` is not used: it multiplies u8
by s8 (activations offset by +128) and saturates its int16 pair sum, which 255 * -128 * 2 overflows. Where the
target has VNNI the intrinsic is the fused ``vpdpwssd`` (the non-saturating form, so still exact).
"""

from __future__ import annotations

import functools
import math

from tvm import s_tir, tirx
from tvm.script import tirx as T
from tvm.sym import Analyzer
from tvm.tirx import IndexMap

from ..passes.target import CpuIsa
from .steps import PREPACK_ANNOTATION, weight_k_major
from .token_rows import outermost_reader

# how far ahead a tile prefetches the packed weight stream (bf16_dot.py says why); on every x86 target, Zen too
# (Zen 4, FLASH projection without it: T = 8 1.97 ms against 1.22, T = 16 2.98 against 2.45; docs/benchmarks.md)
PREFETCH_BYTES = 4096
_INSTRUCTIONS = {  # (vector bits, vnni) -> LLVM intrinsic; int16 operands, int32 lanes
    (256, False): "llvm.x86.avx2.pmadd.wd",
    (512, False): "llvm.x86.avx512.pmaddw.d.512",
    (256, True): "llvm.x86.avx512.vpdpwssd.256",  # AVX512-VNNI+VL or AVX-VNNI ({vex} form)
    (512, True): "llvm.x86.avx512.vpdpwssd.512",
}


def _intrin_name(bits: int, vnni: bool) -> str:
    return f"mtp_int8_{'vpdpwssd' if vnni else 'pmaddwd'}_{bits}"


@functools.cache
def _register(bits: int, vnni: bool) -> str:
    """The tensor intrinsic ``C[0:L] += A[0:2] . B[0:L, 0:2]`` (A int16, B int8 packed in K pairs, C int32):
    the activation pair is broadcast as one 32-bit value, the weight pairs are one sign-extending load."""
    lanes, wide = bits // 32, f"int16x{bits // 16}"
    intrinsic = _INSTRUCTIONS[bits, vnni]

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle):
        A = T.match_buffer(a, (2,), "int16", offset_factor=1)
        B = T.match_buffer(b, (lanes, 2), "int8", offset_factor=1)
        C = T.match_buffer(c, (1, lanes), "int32", offset_factor=1, scope="local", strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0, 0:lanes], A[0:2], B[0:lanes, 0:2])
            T.writes(C[0, 0:lanes])
            for i, k in T.grid(lanes, 2):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    # the int8 cast is how unsafe_set_dtype reads the widened activation back (exact)
                    C[0, vi] = C[0, vi] + T.Cast("int32", T.Cast("int8", A[vk])) * T.Cast("int32", B[vi, vk])

    def operands(A, B):
        pair = T.reinterpret(wide, T.Broadcast(T.reinterpret("int32", A.vload([0], "int16x2")), lanes))
        return pair, T.Cast(wide, B.vload([0, 0], f"int8x{2 * lanes}"))

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle):
        A = T.match_buffer(a, (2,), "int16", offset_factor=1)
        B = T.match_buffer(b, (lanes, 2), "int8", offset_factor=1)
        C = T.match_buffer(c, (1, lanes), "int32", offset_factor=1, scope="local", strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0, 0:lanes], A[0:2], B[0:lanes, 0:2])
            T.writes(C[0, 0:lanes])
            if C.elem_offset < C.strides[0]:  # a call of the tile's first row (see bf16_dot.PREFETCH_BYTES)
                T.evaluate(T.call_llvm_intrin("void", "llvm.prefetch.p0", B.access_ptr("r", offset=PREFETCH_BYTES),
                                              0, 3, 1))
            if vnni:
                C[0, T.ramp(0, 1, lanes)] = T.call_llvm_pure_intrin(
                    f"int32x{lanes}", T.llvm_lookup_intrinsic_id(intrinsic),
                    C[0, T.ramp(0, 1, lanes)], *operands(A, B))
            else:
                C[0, T.ramp(0, 1, lanes)] = C[0, T.ramp(0, 1, lanes)] + T.call_llvm_pure_intrin(
                    f"int32x{lanes}", T.llvm_lookup_intrinsic_id(intrinsic), *operands(A, B))

    s_tir.TensorIntrin.register(_intrin_name(bits, vnni), desc, impl, override=True)
    return _intrin_name(bits, vnni)


def register_int8_intrinsics() -> None:
    """Every intrinsic here, for replaying a trace that names them; registered on first use, not at import:
    parsing their TVMScript takes seconds, which a command that builds nothing must not pay."""
    for bits, vnni in _INSTRUCTIONS:
        _register(bits, vnni)


def int8_lanes(isa: CpuIsa) -> int:
    """The int32 lanes of one accumulator vector; raises ValueError where the ISA has no exact int8 dot."""
    if isa.int8_dot not in ("vnni", "pmaddwd") or isa.vector_bits not in (256, 512):
        raise ValueError(f"{isa.name}: no 16-bit multiply-add for an exact int8 dot product")
    return isa.vector_bits // 32


def pair_packed(tile: int, k_major: bool = False, group: int = 2) -> IndexMap:
    """``[N, K] -> [N / tile, K / group, tile, group]`` (or from ``[K, N]``, ``k_major``): per K pair (or
    ``group``: an AMX-INT8 tile's quads), one strip's weights are contiguous, interleaved (the operand order of
    ``vpmaddwd``, ``vdpbf16ps`` and the AMX products)."""
    g = group
    if k_major:
        return IndexMap.from_func(lambda k, n: (n // tile, k // g, n % tile, k % g), index_dtype="int32")
    return IndexMap.from_func(lambda n, k: (n // tile, k // g, n % tile, k % g), index_dtype="int32")


def operand_indices(sch: s_tir.Schedule, block) -> tuple[int, int | None]:
    """The read indices of the activation (indexed first by the row iterator) and the weight (indexed by the
    column iterator: ``W[n, k]``, or ``W[k, n]`` in a Relax ``matmul``; None once a sibling variant packed it);
    the accumulator's own read is skipped."""
    stmt = sch.get(block)
    row, column = (iv.var for iv in stmt.iter_vars[:2])
    inputs = [(i, [d.min for d in r.region]) for i, r in enumerate(stmt.reads)
              if not r.source.same_as(stmt.writes[0].source)]
    return (next(i for i, idx in inputs if idx[0].same_as(row)),
            next((i for i, idx in inputs if any(d.same_as(column) for d in idx)), None))


def pack_pairs(sch: s_tir.Schedule, block, weight_index: int, tile: int, group: int = 2) -> None:
    """Pack the weight ``[N / tile, K / group, tile, group]`` (``pair_packed``) in a preprocess block the pipeline
    lifts out of the per-call path; every block reading the weight (a kernel's small-T variants too) reads the
    pack."""
    k_major = weight_k_major(sch, block, weight_index)  # a Relax matmul's W[k, n]: packed to the same layout
    weight = sch.get(block).reads[weight_index].source
    packed = sch.cache_read(outermost_reader(sch, block), weight, "global")
    sch.transform_layout(packed, ("write", 0), pair_packed(tile, k_major, group))
    sch.annotate(packed, PREPACK_ANNOTATION, 1)


def pack_strips(sch: s_tir.Schedule, block, weight_index: int, lanes: int, column_vectors: int, *,
                packed: int | None, strip: int | None, group: int = 2) -> None:
    """The weight of a tile of ``column_vectors`` packed in strips of ``strip`` vectors (default: the tile's
    width; a narrower strip makes the tile span strips side by side, each its own address stream), unless a
    sibling variant already ``packed`` it in strips of that many vectors (ValueError: the tile is not whole
    strips). ``group``: the K elements interleaved (``pair_packed``)."""
    width = packed or strip or column_vectors
    if column_vectors % width:
        raise ValueError(f"{column_vectors} vectors are not whole strips of {width} packed ones")
    if packed is None:
        pack_pairs(sch, block, weight_index, width * lanes, group)


def check_tile(sch: s_tir.Schedule, block, lanes: int, register_rows: int, column_vectors: int,
               k_multiple: int = 2) -> None:
    """The shape preconditions shared by the dot-product schedules (ValueError): K a multiple of ``k_multiple``,
    N of the strip, the row count provably of ``register_rows`` (else a predicate blocks the tensorization).
    The tile's size is the register file's business (``cpu_rules.DotPath.fits``): it is a ``local`` buffer,
    which ``passes.register_tiles`` keeps on the stack for LLVM to promote to registers at any size that fits."""
    rows, columns, depth = (sch.get(loop).extent for loop in sch.get_loops(block))
    tile = column_vectors * lanes
    if int(depth) % k_multiple or int(columns) % tile:
        raise ValueError(f"needs K a multiple of {k_multiple} and N of {tile}; got K={depth}, N={columns}")
    if not Analyzer().can_prove_equal(tirx.floormod(rows, register_rows), 0):
        raise ValueError(f"the row count {rows} is not provably a multiple of {register_rows} register rows")


def register_tile_loops(sch: s_tir.Schedule, block, lanes: int, register_rows: int, column_vectors: int):
    """The loops both dot schedules share: (column strip: parallel, row block, K pair, row: unrolled, vector:
    unrolled, lane, pair element), the accumulator tile cached at the row block in scope ``local`` (kept on the
    stack by ``passes.register_tiles``, so LLVM keeps it in registers), its init hoisted out of K. Returns the
    row-block loop and the lane loop (where the intrinsic goes)."""
    t, n, k = sch.get_loops(block)
    no, nv, nl = sch.split(n, [None, column_vectors, lanes])
    kp, ki = sch.split(k, [None, 2])
    to, tr = sch.split(t, [None, register_rows])
    sch.reorder(no, to, kp, tr, nv, nl, ki)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, to)
    sch.unroll(tr)
    sch.unroll(nv)
    acc_loops = sch.get_loops(acc)
    sch.unroll(acc_loops[-2])
    _, inner = sch.split(acc_loops[-1], [None, lanes])
    sch.vectorize(inner)
    sch.parallel(no)
    init = sch.decompose_reduction(block, kp)  # last: vectorize/unroll/parallel fail after it
    sch.vectorize(sch.get_loops(init)[-1])
    return to, nl


def apply_int8_dot(sch: s_tir.Schedule, block, isa: CpuIsa, *, register_rows: int, column_vectors: int,
                   pack_vectors: int | None = None, strip_vectors: int | None = None) -> None:
    """Schedule ``acc[t, n] += int32(A[t, k]) * int32(W[n, k])`` (trivial loops ``t, n, k``; A, W int8) onto
    ``vpmaddwd``/``vpdpwssd``: a ``register_rows`` x ``column_vectors`` tile of int32 accumulator vectors stays
    in registers over all of K; the loops are (column strip: parallel, row block, K pair, row, vector).

    The activation is widened to int16 once per call (a pair broadcast is then one 32-bit load); the weight is
    packed ``[N / strip, K / 2, strip, 2]`` (``pack_pairs``) in a preprocess block the pipeline lifts out of the
    per-call path, in strips of ``strip_vectors`` (default the tile's width), unless ``pack_vectors`` says a
    sibling variant already packed it in strips of that many vectors (``pack_strips``). Preconditions
    (ValueError): the ISA has an int8 dot (``int8_lanes``) and ``check_tile``: K even, N a multiple of the strip
    (``column_vectors`` x lanes), rows of ``register_rows``.
    """
    lanes = int8_lanes(isa)
    check_tile(sch, block, lanes, register_rows, column_vectors)
    depth = int(sch.get(sch.get_loops(block)[2]).extent)
    a_index, w_index = operand_indices(sch, block)
    pack_strips(sch, block, w_index, lanes, column_vectors, packed=pack_vectors, strip=strip_vectors)
    widened = sch.cache_read(block, a_index, "global", consumer_blocks=[block])
    sch.unsafe_set_dtype(widened, 0, "int16")

    _, nl = register_tile_loops(sch, block, lanes, register_rows, column_vectors)
    sch.tensorize(nl, _register(isa.vector_bits, isa.int8_dot == "vnni"))
    wrows = sch.get_loops(widened)
    _, inner = sch.split(wrows[-1], [None, math.gcd(depth, 2 * lanes)])
    sch.vectorize(inner)
    sch.parallel(wrows[0])
