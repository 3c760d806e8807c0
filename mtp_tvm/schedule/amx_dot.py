"""BF16 x BF16 -> FP32 GEMM on AMX tiles (``tdpbf16ps``), where the target has AMX-BF16 (Sapphire Rapids and
later Xeons).

One ``tdpbf16ps`` multiplies a tile of up to 16 activation rows x 32 K (BF16) by a 32 K x 16 column weight tile
held as 16 K pairs of 16 columns: exactly one K step of the pair-packed weight strip ``[N / 16, K / 2, 16, 2]``
that the ``vdpbf16ps`` schedule packs, 1 KiB contiguous. A dot of 16 x 16 x 32 per instruction leaves the decode
GEMMs bound by the weight stream at every T up to 16, where the 16 zmm accumulators of ``vdpbf16ps`` are
compute-bound from T = 8.

The tile registers are not values LLVM allocates in this form (the intrinsics name tiles by number), so one
intrinsic call is a whole output block over all of K: the imported LLVM function configures the tiles
(``ldtilecfg``: ``rows`` rows for the activation and the ``tiles`` accumulators, 16 for the weight), loads the
accumulators from the output, runs the K steps (one activation tile, then per accumulator a weight tile and a
``tdpbf16ps``, alternating two weight tiles so a load overlaps the previous product), stores them and releases
the tiles. Linux hands a process the tile state only on request (``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``); the function asks once per process (a flag in the module) before the first tile
instruction, so a build runs under TVM's runtime alone, and a refusal (a kernel before 5.16, a hypervisor that
hides the state) is the kernel's error, never a SIGILL.

Rounding: each output is FP32, accumulated by ``tdpbf16ps`` in K order one 32-wide step after another, with
DAZ/FTZ; the order inside a step is the hardware's (measured: neither odd-first nor even-first pair order, nor
an exact sum of 2-32 products rounded once, reproduces it), so the sums differ in their last bits from the
``vdpbf16ps`` and FMA schedules. A row's sums do not depend on the other rows of its tile, so the small-T
variants of a kernel, all on tiles here, stay bitwise those of its general body.
"""

from __future__ import annotations

import functools
import re

from tvm import s_tir
from tvm.script import tirx as T

from ..passes.target import CpuIsa
from .int8_dot import check_tile, operand_indices, pack_strips

LANES = 16  # FP32 columns of one accumulator tile (64 bytes a row)
K_STEP = 32  # BF16 K elements of one activation tile row (64 bytes)
MAX_ROWS = 16  # rows of a tile
TILE_REGISTERS = 8  # tmm0-7: the accumulators, one activation tile, two weight tiles
OPERAND_TILES = 3
_A, _B = 5, (6, 7)  # the activation tile and the two weight tiles (the accumulators are 0..tiles-1)
_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA = 158, 0x1023, 18  # x86-64 Linux
_READY = "mtp_tvm_amx_ready"
_NAME = re.compile(r"mtp_amx_bf16_r(\d+)_c(\d+)_k(\d+)")


def max_tiles() -> int:
    """Accumulator tiles a block may hold: the tile registers the operands leave."""
    return TILE_REGISTERS - OPERAND_TILES


def tile_function(rows: int, tiles: int) -> str:
    return f"mtp_tvm_amx_bf16_r{rows}_c{tiles}"


def _config(rows: int, tiles: int) -> str:
    """``ldtilecfg``'s 64 bytes: palette 1, then 16 two-byte row widths and 16 one-byte row counts."""
    config = [0] * 64
    config[0] = 1
    for tile in (*range(tiles), _A, *_B):
        config[16 + 2 * tile] = 64  # bytes a row: 16 FP32 accumulators, 32 BF16 activations, 16 weight pairs
        config[48 + tile] = 16 if tile in _B else rows
    return "<" + ", ".join(f"i8 {b}" for b in config) + ">"


def tile_llvm_ir(rows: int, tiles: int) -> str:
    """``C[rows, 16 * tiles] += A[rows, 32 * ksteps] . W`` with W ``tiles`` packed strips ``strip`` elements
    apart; offsets and row strides in elements. Returns 0, or the error of the tile-state request."""
    body = [f"define linkonce_odr i32 @{tile_function(rows, tiles)}(ptr %c0, i32 %ci, i32 %ldc, ptr %a0, i32 %ai, "
            "i32 %lda, ptr %w0, i32 %wi, i32 %strip, i32 %ksteps) #0 {",
            "entry:",
            "  %config = alloca <64 x i8>, align 64",  # in the entry block: a static slot once inlined
            f"  %ready = load atomic i32, ptr @{_READY} monotonic, align 4",
            "  %asked = icmp ne i32 %ready, 0",
            "  br i1 %asked, label %tiles, label %ask",
            "ask:",
            f"  %rc = call i64 (i64, ...) @syscall(i64 {_ARCH_PRCTL}, i64 {_ARCH_REQ_XCOMP_PERM}, "
            f"i64 {_XFEATURE_XTILEDATA})",
            "  %refused = icmp ne i64 %rc, 0",
            "  br i1 %refused, label %fail, label %granted",
            "fail:",
            "  ret i32 1",
            "granted:",
            f"  store atomic i32 1, ptr @{_READY} monotonic, align 4",
            "  br label %tiles",
            "tiles:",
            f"  store <64 x i8> {_config(rows, tiles)}, ptr %config, align 64",
            "  call void @llvm.x86.ldtilecfg(ptr %config)",
            "  %c = getelementptr float, ptr %c0, i32 %ci",
            "  %a = getelementptr i16, ptr %a0, i32 %ai",
            "  %w = getelementptr i16, ptr %w0, i32 %wi",
            "  %ldc64 = sext i32 %ldc to i64",
            "  %c_stride = shl i64 %ldc64, 2",
            "  %lda64 = sext i32 %lda to i64",
            "  %a_stride = shl i64 %lda64, 1"]
    for t in range(tiles):
        body += [f"  %acc{t} = getelementptr float, ptr %c, i32 {LANES * t}",
                 f"  call void @llvm.x86.tileloadd64(i8 {t}, ptr %acc{t}, i64 %c_stride)"]
    body += ["  br label %step",
             "step:",
             "  %k = phi i32 [0, %tiles], [%next, %step]",
             f"  %a_at = mul i32 %k, {K_STEP}",
             "  %ak = getelementptr i16, ptr %a, i32 %a_at",
             f"  call void @llvm.x86.tileloadd64(i8 {_A}, ptr %ak, i64 %a_stride)",
             f"  %w_at = mul i32 %k, {K_STEP * LANES}"]
    for t in range(tiles):
        b = _B[t % 2]
        body += [f"  %s{t} = mul i32 %strip, {t}",
                 f"  %o{t} = add i32 %w_at, %s{t}",
                 f"  %wt{t} = getelementptr i16, ptr %w, i32 %o{t}",
                 f"  call void @llvm.x86.tileloadd64(i8 {b}, ptr %wt{t}, i64 64)",
                 f"  call void @llvm.x86.tdpbf16ps(i8 {t}, i8 {_A}, i8 {b})"]
    body += ["  %next = add i32 %k, 1",
             "  %more = icmp slt i32 %next, %ksteps",
             "  br i1 %more, label %step, label %store",
             "store:"]
    body += [f"  call void @llvm.x86.tilestored64(i8 {t}, ptr %acc{t}, i64 %c_stride)" for t in range(tiles)]
    body += ["  call void @llvm.x86.tilerelease()",
             "  ret i32 0",
             "}",
             f"@{_READY} = linkonce_odr global i32 0, align 4",
             "declare i64 @syscall(i64, ...)",
             "declare void @llvm.x86.ldtilecfg(ptr)",
             "declare void @llvm.x86.tileloadd64(i8, ptr, i64)",
             "declare void @llvm.x86.tdpbf16ps(i8, i8, i8)",
             "declare void @llvm.x86.tilestored64(i8, ptr, i64)",
             "declare void @llvm.x86.tilerelease()",
             "attributes #0 = { nounwind }"]  # the target's features (amx-tile, amx-bf16) allow the intrinsics
    return " ".join(body)  # one line (LLVM IR is free-form): a schedule trace prints it as a Python string


def intrinsic_name(rows: int, tiles: int, depth: int) -> str:
    return f"mtp_amx_bf16_r{rows}_c{tiles}_k{depth}"


@functools.cache
def register_tile_intrinsic(rows: int, tiles: int, depth: int) -> str:
    """The tensor intrinsic ``C[rows, 16 * tiles] += A[rows, depth] . W[tiles, depth / 2, 16, 2]`` (one output
    block over all of K), registered on first use: its shape is the block's."""
    columns, i32 = LANES * tiles, lambda value: T.Cast("int32", value)  # noqa: E731

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, w: T.handle, c: T.handle):
        A = T.match_buffer(a, (rows, depth), "bfloat16", offset_factor=1, strides=[T.int32(), 1])
        W = T.match_buffer(w, (tiles, depth // 2, LANES, 2), "bfloat16", offset_factor=1)
        C = T.match_buffer(c, (rows, columns), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:rows, 0:columns], A[0:rows, 0:depth], W[0:tiles, 0:depth // 2, 0:LANES, 0:2])
            T.writes(C[0:rows, 0:columns])
            for i, j, k in T.grid(rows, columns, depth):
                with T.sblock("update"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    C[vi, vj] = C[vi, vj] + T.Cast("float32", A[vi, vk]) * T.Cast(
                        "float32", W[vj // LANES, vk // 2, vj % LANES, vk % 2])

    @T.prim_func(s_tir=True)
    def desc_one_row(a: T.handle, w: T.handle, c: T.handle):
        A = T.match_buffer(a, (1, depth), "bfloat16", offset_factor=1, strides=[T.int32(), 1])
        W = T.match_buffer(w, (tiles, depth // 2, LANES, 2), "bfloat16", offset_factor=1)
        C = T.match_buffer(c, (1, columns), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0, 0:columns], A[0, 0:depth], W[0:tiles, 0:depth // 2, 0:LANES, 0:2])
            T.writes(C[0, 0:columns])
            for j, k in T.grid(columns, depth):
                with T.sblock("update"):
                    vj, vk = T.axis.remap("SR", [j, k])
                    C[0, vj] = C[0, vj] + T.Cast("float32", A[0, vk]) * T.Cast(
                        "float32", W[vj // LANES, vk // 2, vj % LANES, vk % 2])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, w: T.handle, c: T.handle):
        A = T.match_buffer(a, (rows, depth), "bfloat16", offset_factor=1, strides=[T.int32(), 1])
        W = T.match_buffer(w, (tiles, depth // 2, LANES, 2), "bfloat16", offset_factor=1)
        C = T.match_buffer(c, (rows, columns), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:rows, 0:columns], A[0:rows, 0:depth], W[0:tiles, 0:depth // 2, 0:LANES, 0:2])
            T.writes(C[0:rows, 0:columns])
            assert T.call_extern("int32", tile_function(rows, tiles), C.data, i32(C.elem_offset), i32(C.strides[0]),
                                 A.data, i32(A.elem_offset), i32(A.strides[0]), W.data, i32(W.elem_offset),
                                 i32(depth // 2 * LANES * 2), i32(depth // K_STEP)) == 0, (
                "AMX: the OS refused this process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM); build for a "
                "target without amx-bf16")

    name = intrinsic_name(rows, tiles, depth)
    s_tir.TensorIntrin.register(name, desc_one_row if rows == 1 else desc, impl, override=True)
    return name


def register_named_tile_intrinsics(text: str) -> None:
    """Every tile intrinsic ``text`` (a schedule trace, a tuning database) names: a replay tensorizes onto them."""
    for rows, tiles, depth in {m.groups() for m in _NAME.finditer(text)}:
        register_tile_intrinsic(int(rows), int(tiles), int(depth))


def apply_amx_dot(sch: s_tir.Schedule, block, isa: CpuIsa, *, register_rows: int, column_vectors: int,
                  pack_vectors: int | None = None, strip_vectors: int | None = None) -> None:
    """Schedule ``Y[t, n] += f32(A[t, k]) * f32(W[n, k])`` (trivial loops ``t, n, k``; A, W bfloat16, Y float32)
    on AMX tiles: blocks of ``register_rows`` rows x ``column_vectors`` accumulator tiles of 16 columns, each one
    intrinsic over all of K, accumulating in place in Y; the loops are (column block: parallel, row block,
    intrinsic). The weight is packed ``[N / 16, K / 2, 16, 2]`` (one tile per strip and K step) in a preprocess
    block the pipeline lifts out of the per-call path, unless a sibling variant already packed it.

    Preconditions (ValueError): the target has AMX-BF16; K a multiple of 32, N of the block, rows provably of
    ``register_rows`` (at most 16), at most ``max_tiles()`` accumulators, strips of one tile."""
    if not isa.bf16_tile:
        raise ValueError(f"{isa.name}: no AMX-BF16 tiles")
    if not (1 <= register_rows <= MAX_ROWS and 1 <= column_vectors <= max_tiles()):
        raise ValueError(f"an AMX block holds 1-{MAX_ROWS} rows and 1-{max_tiles()} accumulator tiles; got "
                         f"{register_rows} x {column_vectors}")
    if (pack_vectors or strip_vectors or 1) != 1:
        raise ValueError("AMX weight tiles are strips of one tile (16 columns)")
    check_tile(sch, block, LANES, register_rows, column_vectors, k_multiple=K_STEP)
    depth = int(sch.get(sch.get_loops(block)[2]).extent)
    _, w_index = operand_indices(sch, block)
    pack_strips(sch, block, w_index, LANES, column_vectors, packed=pack_vectors, strip=1)
    t, n, _ = sch.get_loops(block)
    blocks, columns = sch.split(n, [None, column_vectors * LANES])
    row_blocks, rows = sch.split(t, [None, register_rows])
    sch.reorder(blocks, row_blocks, rows)
    sch.parallel(blocks)
    init = sch.decompose_reduction(block, rows)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.annotate(row_blocks, "pragma_import_llvm", tile_llvm_ir(register_rows, column_vectors))
    # a unit row loop binds no block iterator: one row is tensorized from its column loop
    sch.tensorize(rows if register_rows > 1 else columns, register_tile_intrinsic(register_rows, column_vectors, depth))
