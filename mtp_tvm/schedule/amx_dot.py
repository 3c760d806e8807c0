"""The decode GEMMs on AMX tiles, where the target has them (Sapphire Rapids and later Xeons): BF16 x BF16 ->
FP32 on ``tdpbf16ps`` (AMX-BF16), INT8 x INT8 -> INT32 on ``tdpbssd`` (AMX-INT8, signed x signed: exact, as
the W8A8 contract needs).

One instruction multiplies a tile of up to 16 activation rows x 64 bytes of K by a weight tile of 64 bytes of K
x 16 columns, held as K groups (BF16 pairs, int8 quads) of 16 columns: exactly one K step of the weight packed
``[N / 16, K / group, 16, group]``, 1 KiB contiguous (for BF16 the strip the ``vdpbf16ps`` schedule packs). A
16 x 16 x 32 (BF16) or x 64 (int8) product per instruction leaves the decode GEMMs bound by the weight stream at
every T up to 16, where zmm accumulators are compute-bound from T = 8.

The tile registers are not values LLVM allocates in this form (the intrinsics name tiles by number), so one
intrinsic call is a whole output block over all of K: the imported LLVM function configures the tiles
(``ldtilecfg``: ``rows`` rows for the activation and the ``tiles`` accumulators, 16 for the weight), loads the
accumulators from the output, runs the K steps (one activation tile, then per accumulator a weight tile and a
product, alternating two weight tiles so a load overlaps the previous product), stores them and releases the
tiles. Linux hands a process the tile state only on request (``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``); the function asks once per process (a flag in the module) before the first tile
instruction, so a build runs under TVM's runtime alone, and a refusal (a kernel before 5.16, a hypervisor that
hides the state) is the kernel's error, never a SIGILL.

Rounding (BF16): each output is FP32, accumulated by ``tdpbf16ps`` in K order one 32-wide step after another,
with DAZ/FTZ; the order inside a step is the hardware's (measured: neither odd-first nor even-first pair order,
nor an exact sum of 2-32 products rounded once, reproduces it), so the sums differ in their last bits from the
``vdpbf16ps`` and FMA schedules. A row's sums do not depend on the other rows of its tile, so the small-T
variants of a kernel, all on tiles here, stay bitwise those of its general body. The int8 sums are exact.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable

from tvm import s_tir, tirx
from tvm.script import tirx as T
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as I

from ..passes.target import CpuIsa
from .int8_dot import check_tile, operand_indices, pack_strips

LANES = 16  # 32-bit accumulators a tile row holds (64 bytes)
ROW_BYTES = 64  # bytes of K one activation tile row holds
MAX_ROWS = 16  # rows of a tile
TILE_REGISTERS = 8  # tmm0-7: the accumulators, one activation tile, two weight tiles
OPERAND_TILES = 3
_A, _B = 5, (6, 7)  # the activation tile and the two weight tiles (the accumulators are 0..tiles-1)
_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA = 158, 0x1023, 18  # x86-64 Linux
_READY = "mtp_tvm_amx_ready"


@dataclasses.dataclass(frozen=True)
class TileDot:
    """One AMX product: its operand and accumulator dtypes, the K elements a 32-bit lane groups, the
    instruction, and those dtypes as LLVM types."""

    name: str
    operand: str
    accumulator: str
    group: int
    instruction: str
    llvm_operand: str
    llvm_accumulator: str

    @property
    def k_step(self) -> int:
        """K elements of one activation tile row."""
        return ROW_BYTES // (4 // self.group)

    @property
    def operands(self) -> tuple[str, str]:
        """(activation, accumulator) dtypes: a GEMM block of these takes this product (``cpu_rules``)."""
        return self.operand, self.accumulator

    @property
    def kind(self) -> str:
        """``bf16_tile``/``int8_tile``: the ``CpuIsa`` flag that says a target has it, and its peak's name
        (``tools/measure/peaks.py``)."""
        return f"{self.name}_tile"


BF16_TILES = TileDot("bf16", "bfloat16", "float32", 2, "tdpbf16ps", "i16", "float")
INT8_TILES = TileDot("int8", "int8", "int32", 4, "tdpbssd", "i8", "i32")
TILE_DOTS = {d.name: d for d in (BF16_TILES, INT8_TILES)}
_NAME = re.compile(r"mtp_amx_(" + "|".join(TILE_DOTS) + r")_r(\d+)_c(\d+)_k(\d+)")


def has_tiles(isa: CpuIsa, dot: TileDot) -> bool:
    return getattr(isa, dot.kind)


def tile_call(function: str, c, c_offset, c_stride, a, a_offset, a_stride, w, w_offset, strip, steps):
    """A call of the imported block function (``tile_llvm_ir``), its signature stated once (the intrinsic and
    the peak probe call it): the accumulators, the activation and the packed weight, each a data pointer, an
    element offset and (but the weight) a row stride in elements; the weight strips ``strip`` elements apart;
    ``steps`` K steps. int32 arguments, as the imported signature declares them."""
    i32 = lambda value: T.Cast("int32", value)  # noqa: E731
    return T.call_extern("int32", function, c, i32(c_offset), i32(c_stride), a, i32(a_offset),
                         i32(a_stride), w, i32(w_offset), i32(strip), i32(steps))


def max_tiles() -> int:
    """Accumulator tiles a block may hold: the tile registers the operands leave."""
    return TILE_REGISTERS - OPERAND_TILES


def tile_function(dot: TileDot, rows: int, tiles: int) -> str:
    return f"mtp_tvm_amx_{dot.name}_r{rows}_c{tiles}"


def _config(rows: int, tiles: int) -> str:
    """``ldtilecfg``'s 64 bytes: palette 1, then 16 two-byte row widths and 16 one-byte row counts."""
    config = [0] * 64
    config[0] = 1
    for tile in (*range(tiles), _A, *_B):
        config[16 + 2 * tile] = ROW_BYTES  # 16 accumulators, 64 bytes of activations, 16 weight groups
        config[48 + tile] = 16 if tile in _B else rows
    return "<" + ", ".join(f"i8 {b}" for b in config) + ">"


def tile_llvm_ir(dot: TileDot, rows: int, tiles: int) -> str:
    """``C[rows, 16 * tiles] += A[rows, k_step * ksteps] . W`` with W ``tiles`` packed strips ``strip`` elements
    apart; offsets and row strides in elements. Returns 0, or the error of the tile-state request."""
    a_type, c_type, a_bytes = dot.llvm_operand, dot.llvm_accumulator, 4 // dot.group
    body = [f"define linkonce_odr i32 @{tile_function(dot, rows, tiles)}(ptr %c0, i32 %ci, i32 %ldc, ptr %a0, i32 %ai, "
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
            f"  %c = getelementptr {c_type}, ptr %c0, i32 %ci",
            f"  %a = getelementptr {a_type}, ptr %a0, i32 %ai",
            f"  %w = getelementptr {a_type}, ptr %w0, i32 %wi",
            "  %ldc64 = sext i32 %ldc to i64",
            "  %c_stride = shl i64 %ldc64, 2",
            "  %lda64 = sext i32 %lda to i64",
            f"  %a_stride = mul i64 %lda64, {a_bytes}"]
    for t in range(tiles):
        body += [f"  %acc{t} = getelementptr {c_type}, ptr %c, i32 {LANES * t}",
                 f"  call void @llvm.x86.tileloadd64(i8 {t}, ptr %acc{t}, i64 %c_stride)"]
    body += ["  br label %step",
             "step:",
             "  %k = phi i32 [0, %tiles], [%next, %step]",
             f"  %a_at = mul i32 %k, {dot.k_step}",
             f"  %ak = getelementptr {a_type}, ptr %a, i32 %a_at",
             f"  call void @llvm.x86.tileloadd64(i8 {_A}, ptr %ak, i64 %a_stride)",
             f"  %w_at = mul i32 %k, {dot.k_step * LANES}"]
    for t in range(tiles):
        b = _B[t % 2]
        body += [f"  %s{t} = mul i32 %strip, {t}",
                 f"  %o{t} = add i32 %w_at, %s{t}",
                 f"  %wt{t} = getelementptr {a_type}, ptr %w, i32 %o{t}",
                 f"  call void @llvm.x86.tileloadd64(i8 {b}, ptr %wt{t}, i64 {ROW_BYTES})",
                 f"  call void @llvm.x86.{dot.instruction}(i8 {t}, i8 {_A}, i8 {b})"]
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
             f"declare void @llvm.x86.{dot.instruction}(i8, i8, i8)",
             "declare void @llvm.x86.tilestored64(i8, ptr, i64)",
             "declare void @llvm.x86.tilerelease()",
             "attributes #0 = { nounwind }"]  # the target's features (amx-tile, amx-bf16/int8) allow the intrinsics
    return " ".join(body)  # one line (LLVM IR is free-form): a schedule trace prints it as a Python string


def intrinsic_name(dot: TileDot, rows: int, tiles: int, depth: int) -> str:
    return f"mtp_amx_{dot.name}_r{rows}_c{tiles}_k{depth}"


def _block_func(dot: TileDot, rows: int, tiles: int, depth: int, body: Callable) -> tirx.PrimFunc:
    """A PrimFunc of one output block ``C[rows, 16 * tiles] += A[rows, depth] . W[tiles, depth / g, 16, g]`` (g
    the K group), its root block's statements ``body(A, W, C)``. Built with TVM's IR builder, which TVMScript's
    parser drives: parsing TVMScript cost 40 ms a function, and a build of the tail on AMX registered 8 block
    shapes of 3 parsed functions each (~1 s); built, each takes 1.3 ms."""
    g, columns = dot.group, LANES * tiles
    with IRBuilder() as ib, I.prim_func(s_tir=True):
        a, w, c = (I.arg(name, I.handle()) for name in "awc")
        A = IRBuilder.name("A", I.match_buffer(a, (rows, depth), dot.operand, offset_factor=1,
                                               strides=[IRBuilder.name("a_stride", I.int32()), 1]))
        W = IRBuilder.name("W", I.match_buffer(w, (tiles, depth // g, LANES, g), dot.operand, offset_factor=1))
        C = IRBuilder.name("C", I.match_buffer(c, (rows, columns), dot.accumulator, offset_factor=1,
                                               strides=[IRBuilder.name("c_stride", I.int32()), 1]))
        with I.sblock("root"):
            I.reads(C[0:rows, 0:columns], A[0:rows, 0:depth], W[0:tiles, 0:depth // g, 0:LANES, 0:g])
            I.writes(C[0:rows, 0:columns])
            body(A, W, C)
    return ib.get()


def _products(dot: TileDot, rows: int, tiles: int, depth: int):
    """The intrinsic's description: every product added in place. A 1-row block has no row loop (it is
    tensorized at the column loop)."""
    acc, g = dot.accumulator, dot.group

    def body(A, W, C):
        with I.grid(*((rows,) if rows > 1 else ()), LANES * tiles, depth) as loops:
            with I.sblock("update"):
                vi, vj, vk = I.axis.remap("SSR", loops) if rows > 1 else (0, *I.axis.remap("SR", loops))
                I.buffer_store(C, C[vi, vj] + I.Cast(acc, A[vi, vk]) * I.Cast(acc, W[vj // LANES, vk // g, vj % LANES,
                                                                                     vk % g]), [vi, vj])
    return body


def _block_call(dot: TileDot, rows: int, tiles: int, depth: int):
    """The intrinsic's implementation: one call of the block's imported function (``tile_llvm_ir``)."""
    def body(A, W, C):
        call = tile_call(tile_function(dot, rows, tiles), C.data, C.elem_offset, C.strides[0], A.data, A.elem_offset,
                         A.strides[0], W.data, W.elem_offset, depth * LANES, depth // dot.k_step)
        with I.Assert(call == 0, "AMX: the OS refused this process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM); "
                                 "build for a target without AMX"):
            pass
    return body


@functools.cache
def register_tile_intrinsic(dot: TileDot, rows: int, tiles: int, depth: int) -> str:
    """The tensor intrinsic of one output block over all of K, registered on first use: its shape is the
    block's."""
    shape = (dot, rows, tiles, depth)
    name = intrinsic_name(*shape)
    s_tir.TensorIntrin.register(name, _block_func(*shape, _products(*shape)), _block_func(*shape, _block_call(*shape)),
                                override=True)
    return name


def register_named_tile_intrinsics(text: str) -> None:
    """Every tile intrinsic ``text`` (a schedule trace, a tuning database) names: a replay tensorizes onto them."""
    for name, rows, tiles, depth in {m.groups() for m in _NAME.finditer(text)}:
        register_tile_intrinsic(TILE_DOTS[name], int(rows), int(tiles), int(depth))


def apply_amx_dot(sch: s_tir.Schedule, block, isa: CpuIsa, *, register_rows: int, column_vectors: int,
                  pack_vectors: int | None = None, strip_vectors: int | None = None,
                  dot: TileDot = BF16_TILES) -> None:
    """Schedule ``Y[t, n] += acc(A[t, k]) * acc(W[n, k])`` (trivial loops ``t, n, k``; A, W of ``dot``'s operand
    dtype, Y of its accumulator's) on AMX tiles: blocks of ``register_rows`` rows x ``column_vectors``
    accumulator tiles of 16 columns, each one intrinsic over all of K, accumulating in place in Y; the loops are
    (column block: parallel, row block, intrinsic). The weight is packed ``[N / 16, K / g, 16, g]`` (one tile per
    strip and K step) in a preprocess block the pipeline lifts out of the per-call path, unless a sibling variant
    already packed it.

    Preconditions (ValueError): the target has ``dot``'s tiles; K a multiple of its step, N of the block, rows
    provably of ``register_rows`` (at most 16), at most ``max_tiles()`` accumulators, strips of one tile."""
    if not has_tiles(isa, dot):
        raise ValueError(f"{isa.name}: no AMX-{dot.name.upper()} tiles")
    if not (1 <= register_rows <= MAX_ROWS and 1 <= column_vectors <= max_tiles()):
        raise ValueError(f"an AMX block holds 1-{MAX_ROWS} rows and 1-{max_tiles()} accumulator tiles; got "
                         f"{register_rows} x {column_vectors}")
    if (pack_vectors or strip_vectors or 1) != 1:
        raise ValueError("AMX weight tiles are strips of one tile (16 columns)")
    check_tile(sch, block, LANES, register_rows, column_vectors, k_multiple=dot.k_step)
    depth = int(sch.get(sch.get_loops(block)[2]).extent)
    _, w_index = operand_indices(sch, block)
    pack_strips(sch, block, w_index, LANES, column_vectors, packed=pack_vectors, strip=1, group=dot.group)
    t, n, _ = sch.get_loops(block)
    blocks, columns = sch.split(n, [None, column_vectors * LANES])
    row_blocks, rows = sch.split(t, [None, register_rows])
    sch.reorder(blocks, row_blocks, rows)
    sch.parallel(blocks)
    init = sch.decompose_reduction(block, rows)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.annotate(row_blocks, "pragma_import_llvm", tile_llvm_ir(dot, register_rows, column_vectors))
    # a unit row loop binds no block iterator: one row is tensorized from its column loop
    sch.tensorize(rows if register_rows > 1 else columns,
                  register_tile_intrinsic(dot, register_rows, column_vectors, depth))
