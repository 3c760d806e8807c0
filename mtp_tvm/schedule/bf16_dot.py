"""BF16 x BF16 -> FP32 GEMM as a dot of K pairs: ``vdpbf16ps`` on AVX512-BF16, two FMAs per pair elsewhere.

TVM cannot call ``llvm.x86.avx512bf16.dpbf16ps.512`` directly (BF16 legalisation turns its ``<32 x bfloat>``
operands into integers, and the call then fails LLVM's signature check), so the tensor intrinsic calls a small
``alwaysinline`` LLVM IR function, imported into the module with ``pragma_import_llvm``, that loads its operands
itself; LLVM inlines it to one weight load, one broadcast and one ``vdpbf16ps``. It gets each buffer as its data
pointer plus element offset: ``address_of`` into the packed weight (a kernel-local BF16 buffer until the pipeline
lifts the packing out) addressed FP32-sized elements once BF16 compute legalisation had promoted that buffer,
and ``access_ptr`` fails the legaliser's element-type check; a bare data pointer keeps the buffer 16-bit.

Rounding, exactly: for each K pair ``(2p, 2p+1)`` in ascending ``p``, every FP32 accumulator lane does
``acc = RNE(acc + a[2p+1] * w[2p+1])`` then ``acc = RNE(acc + a[2p] * w[2p])``: the BF16 products are exact in
FP32, each add rounds once to nearest-even, BF16 denormal inputs read as zero (DAZ) and denormal results are
flushed to zero (FTZ), whatever MXCSR says. So the sums differ from an in-order FP32 loop (the odd element of a
pair is added first) but are bitwise reproducible from that order. The FMA form (AVX2, AVX-512 without BF16) adds
in the same order with the same single roundings, so both ISAs give the same sums except where ``vdpbf16ps``
flushes a denormal.
"""

from __future__ import annotations

import functools
import math

from tvm import s_tir
from tvm.script import tirx as T

from ..passes.target import CpuIsa
from .amx_dot import register_named_tile_intrinsics
from .int8_dot import check_tile, operand_indices, pack_strips, register_int8_intrinsics, register_tile_loops
from .steps import vectorized_rows

LANES = 16  # FP32 lanes of one zmm accumulator (vdpbf16ps)
# How far ahead of its loads a tile prefetches the packed weight stream. At T >= 8 a K step computes long enough
# that the out-of-order window covers only a few cache lines of the stream, and the hardware prefetchers fall
# behind: the weight then arrives at a third of the bandwidth (measured, AVX2 FMA form, FLASH logits, T = 8, one
# thread: 29 ms without, 17 ms with 2-4 KiB; native ``vdpbf16ps``, two threads, T = 8: 11.4 ms, 8.9 ms). Every call
# of the tile's first row issues one (the accumulator's offset below its row stride): once the tile is unrolled,
# one ``prefetcht0`` per weight vector of a K step, so a small-T tile spanning several packed strips prefetches
# every stream, and a zmm strip of two vectors both of its cache lines. One per K step, as before, left those to
# the hardware (FLASH logits, SPR, two threads, back to back: native T = 1/2/4 2.93/2.93/3.10 ms, after
# 2.33/2.36/2.90; AVX2 T = 4 5.11, after 3.15; T >= 8 unchanged). On AMD Zen 4 the same prefetches cost time at
# every T (FLASH logits, ``vdpbf16ps``, ``--profile``, alternating processes, medians of 4-6 pairs, ms with / without:
# T = 1 5.82 / 4.39, T = 2 5.51 / 4.27, T = 4 4.08 / 3.67, T = 8 4.34 / 3.98, T = 16 6.09 / 5.87); on Zen 5 they pay
# in the 8-row tile and still cost in the small-T ones (medians of 5-6 pairs, with / without: T = 1 2.37 / 2.32,
# T = 2 3.12 / 2.67, T = 8 2.84 / 3.00, T = 16 3.09 / 3.41), so ``weight_prefetch`` decides per tile. The FMA form
# keeps them on Zen (a ``znver3`` build on Zen 4, 4 x 2 tile, medians with / without: T = 8 8.6 / 9.5 ms, T = 16
# 14.4 / 15.7).
PREFETCH_BYTES = 4096
ZEN5_PREFETCH_ROWS = 8  # the register rows from which a Zen 5 (or later) tile prefetches its weight stream
_PREFETCH_IR = f"""
  %first = icmp ult i32 %ci, %row
  br i1 %first, label %fetch, label %compute
fetch:
  %ahead = getelementptr i8, ptr %w, i32 {PREFETCH_BYTES}
  call void @llvm.prefetch.p0(ptr %ahead, i32 0, i32 3, i32 1)
  br label %compute
compute:"""
INTRIN = "mtp_bf16_dpbf16ps_512"  # the tile's first row prefetches the weight stream; INTRIN + NO_PREFETCH: none
NO_PREFETCH = "_no_prefetch"
BF16_DOT_FUNCTION = "mtp_tvm_dpbf16ps_512"


def weight_prefetch(isa: CpuIsa, register_rows: int) -> bool:
    """Whether a ``vdpbf16ps`` tile of ``register_rows`` rows prefetches its weight stream on ``isa``: on an Intel
    core always, on Zen 4 and older never, on Zen 5 in tiles of ``ZEN5_PREFETCH_ROWS`` rows (``PREFETCH_BYTES``
    says why)."""
    if not isa.zen:
        return True
    return isa.zen >= 5 and register_rows >= ZEN5_PREFETCH_ROWS


def bf16_dot_llvm_ir() -> str:
    """The ``vdpbf16ps`` dot as an LLVM function (``BF16_DOT_FUNCTION``). A call prefetches when its accumulator
    offset is below its ``row`` argument (the tile's first row); a call passing ``row`` 0 never does (LLVM drops
    the branch), so the intrinsics with and without the prefetch share the function. ``linkonce_odr``: every
    kernel of a module may import the same text, and the linker keeps one copy."""
    return f"""
define linkonce_odr i32 @{BF16_DOT_FUNCTION}(ptr noalias %c0, i32 %ci, i32 %row, ptr noalias %a0, i32 %ai, ptr noalias %w0, i32 %wi) #0 {{
  %c = getelementptr float, ptr %c0, i32 %ci
  %a = getelementptr i16, ptr %a0, i32 %ai
  %w = getelementptr i16, ptr %w0, i32 %wi
  %acc = load <16 x float>, ptr %c, align 4
  %pair = load i32, ptr %a, align 2
  %one = insertelement <16 x i32> poison, i32 %pair, i64 0
  %all = shufflevector <16 x i32> %one, <16 x i32> poison, <16 x i32> zeroinitializer
  %av = bitcast <16 x i32> %all to <32 x bfloat>
{_PREFETCH_IR}
  %wv = load <32 x bfloat>, ptr %w, align 2
  %sum = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %acc, <32 x bfloat> %av, <32 x bfloat> %wv)
  store <16 x float> %sum, ptr %c, align 4
  ret i32 0
}}
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
declare void @llvm.prefetch.p0(ptr, i32, i32, i32)
attributes #0 = {{ alwaysinline nounwind }}
""".strip().replace("\n", " ")  # one line (LLVM IR is free-form): a schedule trace prints it as a Python string


def pair_fma_function(lanes: int) -> str:
    return f"mtp_tvm_bf16_pair_fma_{lanes}"


def pair_fma_llvm_ir(lanes: int) -> str:
    """``vdpbf16ps``'s arithmetic with FMAs, for a CPU without AVX512-BF16: one load of ``lanes`` packed weight
    pairs gives both FP32 vectors with one integer op each (the odd elements are the high halves: ``and
    0xffff0000``; the even ones the low halves: ``shl 16``), no zero-extension; the activation pair comes
    widened to FP32 (two broadcasts). The odd product is added first, as ``vdpbf16ps`` does, each FMA exact in
    its product (BF16 x BF16 fits FP32), so the sums are those of ``vdpbf16ps`` but for its DAZ/FTZ."""
    v, mask = f"<{lanes} x float>", f"<{lanes} x i32>"
    splat = lambda value: "<" + ", ".join([f"i32 {value}"] * lanes) + ">"  # noqa: E731
    return f"""
define linkonce_odr i32 @{pair_fma_function(lanes)}(ptr noalias %c0, i32 %ci, i32 %row, ptr noalias %a0, i32 %ai, ptr noalias %w0, i32 %wi) #0 {{
  %c = getelementptr float, ptr %c0, i32 %ci
  %a = getelementptr float, ptr %a0, i32 %ai
  %a1 = getelementptr float, ptr %a, i32 1
  %w = getelementptr i16, ptr %w0, i32 %wi
  %acc = load {v}, ptr %c, align 4
  %even = load float, ptr %a, align 4
  %odd = load float, ptr %a1, align 4
  %e1 = insertelement {v} poison, float %even, i64 0
  %ae = shufflevector {v} %e1, {v} poison, {mask} zeroinitializer
  %o1 = insertelement {v} poison, float %odd, i64 0
  %ao = shufflevector {v} %o1, {v} poison, {mask} zeroinitializer
{_PREFETCH_IR}
  %pairs = load {mask}, ptr %w, align 2
  %high = and {mask} %pairs, {splat(-65536)}
  %low = shl {mask} %pairs, {splat(16)}
  %wo = bitcast {mask} %high to {v}
  %we = bitcast {mask} %low to {v}
  %s1 = call {v} @llvm.fma.v{lanes}f32({v} %ao, {v} %wo, {v} %acc)
  %s2 = call {v} @llvm.fma.v{lanes}f32({v} %ae, {v} %we, {v} %s1)
  store {v} %s2, ptr %c, align 4
  ret i32 0
}}
declare {v} @llvm.fma.v{lanes}f32({v}, {v}, {v})
declare void @llvm.prefetch.p0(ptr, i32, i32, i32)
attributes #0 = {{ alwaysinline nounwind }}
""".strip().replace("\n", " ")


def dot_call(function: str, acc, acc_offset, row_stride, a, a_offset, w, w_offset):
    """A call of an imported dot function, its signature stated once (the GEMMs and the peak probe call it):
    the accumulator, its offset and its tile's row stride (the calls below the stride prefetch), the activation
    and the packed weight, each a data pointer and an element offset. int32 offsets (< 2^31 in every buffer
    here): a kernel whose shapes are all static has its indices narrowed to int32 by TVM, and the call must
    match the imported signature either way."""
    i32 = lambda value: T.Cast("int32", value)  # noqa: E731
    return T.call_extern("int32", function, acc, i32(acc_offset), i32(row_stride), a, i32(a_offset), w,
                         i32(w_offset))


def _desc_and_impl(lanes: int, activation: str, function: str, prefetch: bool = True):
    """The intrinsic ``C[0:lanes] += A[0:2] . W[0:lanes, 0:2]`` (W bfloat16 packed in K pairs, C a float32
    register tile) and its implementation, a call of the imported LLVM function ``function``, which prefetches
    the weight stream in the tile's first row unless ``prefetch`` is False (it then passes the row stride as 0).
    ``activation``: ``bfloat16`` (read as is) or ``float32`` (the activation widened once per call:
    unsafe_set_dtype reads it back through a cast to bfloat16, exact)."""

    def a_value(A, vk):
        return T.Cast("float32", A[vk]) if activation == "bfloat16" else T.Cast("float32", T.Cast("bfloat16", A[vk]))

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, w: T.handle, c: T.handle):
        A = T.match_buffer(a, (2,), activation, offset_factor=1)
        W = T.match_buffer(w, (lanes, 2), "bfloat16", offset_factor=1)
        C = T.match_buffer(c, (1, lanes), "float32", offset_factor=1, scope="local", strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0, 0:lanes], A[0:2], W[0:lanes, 0:2])
            T.writes(C[0, 0:lanes])
            for i, k in T.grid(lanes, 2):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[0, vi] = C[0, vi] + a_value(A, vk) * T.Cast("float32", W[vi, vk])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, w: T.handle, c: T.handle):
        A = T.match_buffer(a, (2,), activation, offset_factor=1)
        W = T.match_buffer(w, (lanes, 2), "bfloat16", offset_factor=1)
        C = T.match_buffer(c, (1, lanes), "float32", offset_factor=1, scope="local", strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0, 0:lanes], A[0:2], W[0:lanes, 0:2])
            T.writes(C[0, 0:lanes])
            T.evaluate(dot_call(function, C.data, C.elem_offset, C.strides[0] if prefetch else 0, A.data,
                                A.elem_offset, W.data, W.elem_offset))

    return desc, impl


@functools.cache
def _register(prefetch: bool) -> str:
    """A ``vdpbf16ps`` tensor intrinsic, registered on first use (its TVMScript takes a second to parse)."""
    name = INTRIN if prefetch else INTRIN + NO_PREFETCH
    s_tir.TensorIntrin.register(name, *_desc_and_impl(LANES, "bfloat16", BF16_DOT_FUNCTION, prefetch),
                                override=True)
    return name


@functools.cache
def _register_pair_fma(lanes: int) -> str:
    name = f"mtp_bf16_pair_fma_{lanes}"
    s_tir.TensorIntrin.register(name, *_desc_and_impl(lanes, "float32", pair_fma_function(lanes)), override=True)
    return name


def register_dot_intrinsics(text: str = "") -> None:
    """Every tensor intrinsic of the CPU GEMMs, before replaying a trace that names them (tuning records,
    ``bisect --schedule-trace``): the schedules register them on first use, not at import. An AMX intrinsic has
    its block's shape, so those ``text`` (the trace, the records) names are registered."""
    for prefetch in (True, False):
        _register(prefetch)
    for lanes in (8, 16):
        _register_pair_fma(lanes)
    register_int8_intrinsics()
    register_named_tile_intrinsics(text)


def bf16_lanes(isa: CpuIsa) -> int:
    """The FP32 lanes of one accumulator vector of the BF16 dot: 16 with ``vdpbf16ps``, else the FMA vector's;
    raises ValueError where the ISA has neither (no FMA: the plain FMA path of ``cpu_rules`` takes it)."""
    if isa.bf16_dot:
        return LANES
    if not isa.fma or isa.vector_bits not in (256, 512):
        raise ValueError(f"{isa.name}: neither AVX512-BF16 nor FMA on 256/512-bit vectors for a BF16 pair dot")
    return isa.fp32_lanes


def apply_bf16_dot(sch: s_tir.Schedule, block, isa: CpuIsa, *, register_rows: int, column_vectors: int,
                   pack_vectors: int | None = None, strip_vectors: int | None = None) -> None:
    """Schedule ``acc[t, n] += f32(A[t, k]) * f32(W[n, k])`` (trivial loops ``t, n, k``; A, W bfloat16, acc
    float32) as a BF16 pair dot: a ``register_rows`` x ``column_vectors`` tile of FP32 accumulator vectors stays
    in registers over all of K; the loops are (column strip: parallel, row block, K pair, row, vector). The
    weight is packed ``[N / strip, K / 2, strip, 2]`` (``pack_pairs``; a vector's K pair is one load) in a
    preprocess block the pipeline lifts out of the per-call path, in strips of ``strip_vectors`` (default the
    tile's width), unless ``pack_vectors`` says a sibling variant already packed it in strips of that many vectors
    (``pack_strips``; ``column_vectors`` is a multiple: strips side by side).

    The instruction is the ISA's: ``vdpbf16ps`` on AVX512-BF16 (the activation pair broadcast straight from A, 4
    bytes), else two FMAs per K pair on the weight pairs split by one integer op each (``pair_fma_llvm_ir``; the
    activation widened to FP32 once per call). Both add the odd product first: the same sums on either ISA.

    Preconditions (ValueError): ``bf16_lanes``; K a multiple of 32 (the kernels' contract: whole 64-byte rows
    of A; the pair form itself needs K even) and N of the strip (lanes x ``column_vectors``); the row count
    provably a multiple of ``register_rows`` (``check_tile``).
    """
    lanes = bf16_lanes(isa)
    check_tile(sch, block, lanes, register_rows, column_vectors, k_multiple=32)
    a_index, w_index = operand_indices(sch, block)
    pack_strips(sch, block, w_index, lanes, column_vectors, packed=pack_vectors, strip=strip_vectors)
    if isa.bf16_dot:
        intrinsic, llvm_ir = _register(weight_prefetch(isa, register_rows)), bf16_dot_llvm_ir()
    else:
        intrinsic, llvm_ir = _register_pair_fma(lanes), pair_fma_llvm_ir(lanes)
        widened = sch.cache_read(block, a_index, "global", consumer_blocks=[block])
        sch.unsafe_set_dtype(widened, 0, "float32")
        vectorized_rows(sch, widened, math.gcd(int(sch.get(sch.get_loops(block)[2]).extent), lanes))
    rows, nl = register_tile_loops(sch, block, lanes, register_rows, column_vectors)
    sch.annotate(rows, "pragma_import_llvm", llvm_ir)
    sch.tensorize(nl, intrinsic)
