"""BF16 x BF16 -> FP32 GEMM on AVX512-BF16 through ``vdpbf16ps``.

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
pair is added first) but are bitwise reproducible from that order.
"""

from __future__ import annotations

import functools

from tvm import s_tir
from tvm.script import tirx as T

from ..passes.target import CpuIsa
from .int8_dot import check_tile, operand_indices, pack_pairs, register_int8_intrinsics, register_tile_loops

LANES = 16  # FP32 lanes of one zmm accumulator
INTRIN = "mtp_bf16_dpbf16ps_512"
BF16_DOT_FUNCTION = "mtp_tvm_dpbf16ps_512"
# linkonce_odr: every kernel of a module may import the same text, and the linker keeps one copy
BF16_DOT_LLVM_IR = f"""
define linkonce_odr i32 @{BF16_DOT_FUNCTION}(ptr noalias %c0, i32 %ci, ptr noalias %a0, i32 %ai, ptr noalias %w0, i32 %wi) #0 {{
  %c = getelementptr float, ptr %c0, i32 %ci
  %a = getelementptr i16, ptr %a0, i32 %ai
  %w = getelementptr i16, ptr %w0, i32 %wi
  %acc = load <16 x float>, ptr %c, align 4
  %pair = load i32, ptr %a, align 2
  %one = insertelement <16 x i32> poison, i32 %pair, i64 0
  %all = shufflevector <16 x i32> %one, <16 x i32> poison, <16 x i32> zeroinitializer
  %av = bitcast <16 x i32> %all to <32 x bfloat>
  %wv = load <32 x bfloat>, ptr %w, align 2
  %sum = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %acc, <32 x bfloat> %av, <32 x bfloat> %wv)
  store <16 x float> %sum, ptr %c, align 4
  ret i32 0
}}
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
attributes #0 = {{ alwaysinline nounwind }}
""".strip().replace("\n", " ")  # one line (LLVM IR is free-form): a schedule trace prints it as a Python string


@functools.cache
def _register() -> None:
    """The ``vdpbf16ps`` tensor intrinsic, registered on first use (its TVMScript takes a second to parse)."""

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, w: T.handle, c: T.handle):
        A = T.match_buffer(a, (2,), "bfloat16", offset_factor=1)
        W = T.match_buffer(w, (LANES, 2), "bfloat16", offset_factor=1)
        C = T.match_buffer(c, (LANES,), "float32", offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:LANES], A[0:2], W[0:LANES, 0:2])
            T.writes(C[0:LANES])
            for i, k in T.grid(LANES, 2):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.Cast("float32", A[vk]) * T.Cast("float32", W[vi, vk])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, w: T.handle, c: T.handle):
        A = T.match_buffer(a, (2,), "bfloat16", offset_factor=1)
        W = T.match_buffer(w, (LANES, 2), "bfloat16", offset_factor=1)
        C = T.match_buffer(c, (LANES,), "float32", offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:LANES], A[0:2], W[0:LANES, 0:2])
            T.writes(C[0:LANES])
            # int32 offsets (elements, < 2^31 in every buffer here): a kernel whose shapes are all static has its
            # indices narrowed to int32 by TVM, and the call must match the imported signature either way
            T.evaluate(T.call_extern("int32", BF16_DOT_FUNCTION, C.data, T.Cast("int32", C.elem_offset), A.data,
                                     T.Cast("int32", A.elem_offset), W.data, T.Cast("int32", W.elem_offset)))

    s_tir.TensorIntrin.register(INTRIN, desc, impl, override=True)


def register_dot_intrinsics() -> None:
    """Every tensor intrinsic of the CPU GEMMs, before replaying a trace that names them (tuning records,
    ``bisect --schedule-trace``): the schedules register them on first use, not at import."""
    _register()
    register_int8_intrinsics()


def apply_bf16_dot(sch: s_tir.Schedule, block, isa: CpuIsa, *, register_rows: int, column_vectors: int,
                   pack_vectors: int | None = None) -> None:
    """Schedule ``acc[t, n] += f32(A[t, k]) * f32(W[n, k])`` (trivial loops ``t, n, k``; A, W bfloat16, acc
    float32) onto ``vdpbf16ps``: a ``register_rows`` x ``column_vectors`` tile of 16-lane FP32 accumulators stays
    in registers over all of K; the loops are (column strip: parallel, row block, K pair, row, vector). Each step
    broadcasts an activation pair straight from A (4 bytes) and loads a weight vector: the weight is packed
    ``[N / strip, K / 2, strip, 2]`` (``pack_pairs``; a 16-column vector's K pair is one 64-byte load) in a
    preprocess block the pipeline lifts out of the per-call path, unless ``pack_vectors`` says a sibling variant
    already packed it in strips of that many vectors (``column_vectors`` is then a multiple: strips side by side).

    Preconditions (ValueError): ``isa.bf16_dot``; K a multiple of 32 (the kernels' contract: whole 64-byte rows
    of A; the broadcast form itself needs K even) and N of the strip (16 x ``column_vectors``); the row count
    provably a multiple of ``register_rows``; the tile under 1 KiB (``check_tile``).
    """
    if not isa.bf16_dot:
        raise ValueError(f"{isa.name}: no AVX512-BF16 (vdpbf16ps)")
    check_tile(sch, block, 512, LANES, register_rows, column_vectors, k_multiple=32)
    if pack_vectors is not None and column_vectors % pack_vectors:
        raise ValueError(f"{column_vectors} vectors are not whole strips of the {pack_vectors} packed ones")
    if pack_vectors is None:
        pack_pairs(sch, block, operand_indices(sch, block)[1], column_vectors * LANES)

    _register()
    rows, nl = register_tile_loops(sch, block, LANES, register_rows, column_vectors)
    sch.annotate(rows, "pragma_import_llvm", BF16_DOT_LLVM_IR)
    sch.tensorize(nl, INTRIN)
