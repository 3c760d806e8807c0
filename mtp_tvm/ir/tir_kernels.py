"""Hand-written TensorIR (TVMScript) kernels of the MTP tail.

Each factory closes over the static sizes (hidden D, vocab shard V, eps) and returns a ``PrimFunc`` whose row
count ``m`` is symbolic, so one binary serves any token count. Block names (``sumsq_chunk``, ``amax``,
``gemm_e`` ...) are stable: schedules, dumps and bisect reports refer to them.

Reductions over K run in the reference's accumulation order (the norms' chunked sums of squares as
``(k_chunk, k_inner)`` loops of ``K_CHUNK``). The GEMMs have trivial block bindings (``t, n, k``: the tiling is
the schedule's, which is what MetaSchedule's multi-level tiling needs). A GEMM takes the token count ``tokens``
and runs its rows as ``ceil(tokens / 16) * 16``: every padded row, written so that the schedule phase can cut the
row loops to what its tile needs (a CPU register tile's ``ceil(T / q) * q`` and small-T variants:
``schedule/token_rows.py``) without a bounds predicate. The kernels are the same whatever the schedule: the
schedule phase decides the rows, so two builds that differ only in their schedule first differ there.
"""

from __future__ import annotations

import functools

from tvm.script import tirx as T

from ..contract.presets import (
    INT8_AMAX_EPS,
    INT8_SCALE_MAX,
    K_CHUNK,
    MAX_LOGIT_ROWS,
    TOKEN_TILE,
)
from ..support.rounding import ceil_to

# Relax's kOpaque op pattern: FuseOps leaves hand-written kernels alone; their boundaries are chosen by hand.
OPAQUE = 8


@functools.cache
def pad_rows(cols: int, dtype: str):
    """``[n, cols] -> [ceil16(n), cols]``, pad rows zero."""

    @T.prim_func(s_tir=True, private=True)  # private: only the Relax main is an entry point
    def pad_rows(x: T.handle, xp: T.handle):
        T.func_attr({"tir.noalias": True, "op_pattern": OPAQUE})
        n = T.int64()
        X = T.match_buffer(x, (n, cols), dtype)
        XP = T.match_buffer(xp, (ceil_to(n, TOKEN_TILE), cols), dtype)
        for i, k in T.grid(ceil_to(n, TOKEN_TILE), cols):
            with T.sblock("pad_rows"):
                vi, vk = T.axis.remap("SS", [i, k])
                XP[vi, vk] = T.if_then_else(vi < n, X[vi, vk], T.Cast(dtype, 0))

    return pad_rows


@functools.cache
def unpad_rows(cols: int, dtype: str):
    """``[ceil16(n), cols] -> [n, cols]``: the padding never leaks into outputs."""

    @T.prim_func(s_tir=True, private=True)  # private: only the Relax main is an entry point
    def unpad_rows(xp: T.handle, x: T.handle):
        T.func_attr({"tir.noalias": True, "op_pattern": OPAQUE})
        n = T.int64()
        X = T.match_buffer(x, (n, cols), dtype)
        XP = T.match_buffer(xp, (ceil_to(n, TOKEN_TILE), cols), dtype)
        for i, k in T.grid(n, cols):
            with T.sblock("unpad_rows"):
                vi, vk = T.axis.remap("SS", [i, k])
                X[vi, vk] = XP[vi, vk]

    return unpad_rows


def _inv_rms_macro(hidden: int, eps: float):
    """Stage 1 of every RMSNorm (spec §1.3): FP32 sum of squares per 128-chunk, chunks summed in order."""
    chunks = hidden // K_CHUNK
    d_inv = 1.0 / hidden

    @T.macro
    def inv_rms(X, inv, m):
        sq_chunk = T.sblock_alloc_buffer((m, chunks), "float32")
        sq = T.sblock_alloc_buffer((m,), "float32")
        for t, c, k in T.grid(m, chunks, K_CHUNK):
            with T.sblock("sumsq_chunk"):
                vt, vc, vk = T.axis.remap("SSR", [t, c, k])
                with T.init():
                    sq_chunk[vt, vc] = T.float32(0)
                sq_chunk[vt, vc] = sq_chunk[vt, vc] + T.Cast("float32", X[vt, vc * K_CHUNK + vk]) * T.Cast(
                    "float32", X[vt, vc * K_CHUNK + vk])
        for t, c in T.grid(m, chunks):
            with T.sblock("sumsq"):
                vt, vc = T.axis.remap("SR", [t, c])
                with T.init():
                    sq[vt] = T.float32(0)
                sq[vt] = sq[vt] + sq_chunk[vt, vc]
        for t in range(m):
            with T.sblock("inv_rms"):
                vt = T.axis.remap("S", [t])
                inv[vt] = T.rsqrt(sq[vt] * T.float32(d_inv) + T.float32(eps))

    return inv_rms


@functools.cache
def rms_norm(hidden: int, eps: float):
    """Shared-head RMSNorm (spec §2.2): ``bf16((x * inv) * w)``."""
    inv_rms = _inv_rms_macro(hidden, eps)

    @T.prim_func(s_tir=True, private=True)  # private: only the Relax main is an entry point
    def rms_norm(x: T.handle, w: T.Buffer((hidden,), "float32"), y: T.handle):
        T.func_attr({"tir.noalias": True, "op_pattern": OPAQUE})
        m = T.int64()
        X = T.match_buffer(x, (m, hidden), "bfloat16")
        Y = T.match_buffer(y, (m, hidden), "bfloat16")
        inv = T.sblock_alloc_buffer((m,), "float32")
        inv_rms(X, inv, m)
        for t, k in T.grid(m, hidden):
            with T.sblock("normalize"):
                vt, vk = T.axis.remap("SS", [t, k])
                Y[vt, vk] = T.Cast("bfloat16", T.Cast("float32", X[vt, vk]) * inv[vt] * w[vk])

    return rms_norm


@functools.cache
def rms_norm_smooth(hidden: int, eps: float):
    """Projection input norm (spec §1.4): ``bf16(((x * inv) * w) * smooth)``, the seed era's one BF16 cast."""
    inv_rms = _inv_rms_macro(hidden, eps)

    @T.prim_func(s_tir=True, private=True)  # private: only the Relax main is an entry point
    def rms_norm_smooth(x: T.handle, w: T.Buffer((hidden,), "float32"), smooth: T.Buffer((hidden,), "float32"),
                        y: T.handle):
        T.func_attr({"tir.noalias": True, "op_pattern": OPAQUE})
        m = T.int64()
        X = T.match_buffer(x, (m, hidden), "bfloat16")
        Y = T.match_buffer(y, (m, hidden), "bfloat16")
        inv = T.sblock_alloc_buffer((m,), "float32")
        inv_rms(X, inv, m)
        for t, k in T.grid(m, hidden):
            with T.sblock("normalize"):
                vt, vk = T.axis.remap("SS", [t, k])
                Y[vt, vk] = T.Cast("bfloat16", T.Cast("float32", X[vt, vk]) * inv[vt] * w[vk] * smooth[vk])

    return rms_norm_smooth


@functools.cache
def quantize_rows(hidden: int):
    """Per-token symmetric INT8 quantisation (spec §1.5): ``q = rint(y * 127/amax)``, amax floored at 1e-4.

    Returns the dequant scale ``1 / (127/amax)`` per row. ``nearbyint`` rounds half to even, as the
    reference's ``rint`` and ``torch.round`` do; the int32 -> fp16 -> int8 chain is kept verbatim.
    """

    @T.prim_func(s_tir=True, private=True)  # private: only the Relax main is an entry point
    def quantize_rows(y: T.handle, q: T.handle, scale: T.handle):
        T.func_attr({"tir.noalias": True, "op_pattern": OPAQUE})
        m = T.int64()
        Y = T.match_buffer(y, (m, hidden), "bfloat16")
        Q = T.match_buffer(q, (m, hidden), "int8")
        S = T.match_buffer(scale, (m,), "float32")
        amax = T.sblock_alloc_buffer((m,), "float32")
        scale_q = T.sblock_alloc_buffer((m,), "float32")
        for t, k in T.grid(m, hidden):
            with T.sblock("amax"):
                vt, vk = T.axis.remap("SR", [t, k])
                with T.init():  # max's identity, so GPU schedules can reduce across threads; floored below
                    amax[vt] = T.min_value("float32")
                amax[vt] = T.max(amax[vt], T.fabs(T.Cast("float32", Y[vt, vk])))
        for t in range(m):
            with T.sblock("quant_scale"):
                vt = T.axis.remap("S", [t])
                # S is 1 / scale_q, recomputed rather than read back, so the block stays complete (bindable)
                scale_q[vt] = T.float32(INT8_SCALE_MAX) / T.max(amax[vt], T.float32(INT8_AMAX_EPS))
                S[vt] = T.float32(1) / (T.float32(INT8_SCALE_MAX) / T.max(amax[vt], T.float32(INT8_AMAX_EPS)))
        for t, k in T.grid(m, hidden):
            with T.sblock("quantize"):
                vt, vk = T.axis.remap("SS", [t, k])
                Q[vt, vk] = T.Cast("int8", T.Cast("float16", T.Cast(
                    "int32", T.nearbyint(T.Cast("float32", Y[vt, vk]) * scale_q[vt]))))

    return quantize_rows


@functools.cache
def w8a8_dual_gemm(hidden: int):
    """``e_proj(q_h) + h_proj(q_p)`` (spec §1.6): two INT8 x INT8 -> INT32 GEMMs (exact, so any K order), each
    dequantised by token scale then channel scale, summed in FP32, BF16 out. See the module docstring for
    ``tokens`` and the rows it runs."""

    @T.prim_func(s_tir=True, private=True)  # private: only the Relax main is an entry point
    def w8a8_dual_gemm(q_h: T.handle, q_p: T.handle, e_w: T.Buffer((hidden, hidden), "int8"),
                       h_w: T.Buffer((hidden, hidden), "int8"), s_h: T.handle, s_p: T.handle,
                       e_ws: T.Buffer((hidden,), "float32"), h_ws: T.Buffer((hidden,), "float32"), tokens: T.int64,
                       out: T.handle):
        T.func_attr({"tir.noalias": True, "op_pattern": OPAQUE})
        m = T.int64()
        QH = T.match_buffer(q_h, (m, hidden), "int8")
        QP = T.match_buffer(q_p, (m, hidden), "int8")
        SH = T.match_buffer(s_h, (m,), "float32")
        SP = T.match_buffer(s_p, (m,), "float32")
        OUT = T.match_buffer(out, (m, hidden), "bfloat16")
        rows = T.meta_var(ceil_to(tokens, TOKEN_TILE))  # an expression, not a let
        acc_e = T.sblock_alloc_buffer((m, hidden), "int32")
        acc_h = T.sblock_alloc_buffer((m, hidden), "int32")
        for t, n, k in T.grid(rows, hidden, hidden):
            with T.sblock("gemm_e"):
                vt = T.axis.spatial(m, t)
                vn, vk = T.axis.remap("SR", [n, k])
                with T.init():
                    acc_e[vt, vn] = 0
                acc_e[vt, vn] = acc_e[vt, vn] + T.Cast("int32", QH[vt, vk]) * T.Cast("int32", e_w[vn, vk])
        for t, n, k in T.grid(rows, hidden, hidden):
            with T.sblock("gemm_h"):
                vt = T.axis.spatial(m, t)
                vn, vk = T.axis.remap("SR", [n, k])
                with T.init():
                    acc_h[vt, vn] = 0
                acc_h[vt, vn] = acc_h[vt, vn] + T.Cast("int32", QP[vt, vk]) * T.Cast("int32", h_w[vn, vk])
        for t, n in T.grid(rows, hidden):
            with T.sblock("dequant_sum"):
                vt = T.axis.spatial(m, t)
                vn = T.axis.remap("S", [n])
                OUT[vt, vn] = T.Cast("bfloat16", T.Cast("float32", acc_e[vt, vn]) * SH[vt] * e_ws[vn]
                                     + T.Cast("float32", acc_h[vt, vn]) * SP[vt] * h_ws[vn])

    return w8a8_dual_gemm


@functools.cache
def lm_head_logits(hidden: int, vocab_shard: int):
    """Local logits (spec §2.1): BF16 x BF16 -> FP32, K accumulated in order (so in chunk order, whatever the
    chunking). See the module docstring for ``tokens`` and the rows it runs."""

    @T.prim_func(s_tir=True, private=True)  # private: only the Relax main is an entry point
    def lm_head_logits(x: T.handle, w: T.Buffer((vocab_shard, hidden), "bfloat16"), tokens: T.int64, y: T.handle):
        T.func_attr({"tir.noalias": True, "op_pattern": OPAQUE})
        m = T.int64()
        X = T.match_buffer(x, (m, hidden), "bfloat16")
        Y = T.match_buffer(y, (m, vocab_shard), "float32")
        rows = T.meta_var(ceil_to(tokens, TOKEN_TILE))  # an expression, not a let
        for t, v, k in T.grid(rows, vocab_shard, hidden):
            with T.sblock("logits"):
                vt = T.axis.spatial(m, t)
                vv, vk = T.axis.remap("SR", [v, k])
                with T.init():
                    Y[vt, vv] = T.float32(0)
                Y[vt, vv] = Y[vt, vv] + T.Cast("float32", X[vt, vk]) * T.Cast("float32", w[vv, vk])

    return lm_head_logits


@functools.cache
def lm_head_tp(hidden: int, vocab_shard: int, tp: int, ranks: int, owners: int):
    """The TP-sharded LM head with greedy sampling (spec §3.2), all shards on one device.

    ``x`` is token-major ``[n, D]`` with ``n = owners * rows``. ``select_rows`` gathers each owner's selected
    rows (index -1: a zero row; others clamped into ``[0, rows)``); ``logits`` multiplies them with one copy
    of every shard (ranks ``0..tp-1``; column ``v`` is row ``v % shard`` of shard ``v // shard``), BF16 x BF16
    -> FP32 with K summed in order (so in chunk order), vocab outermost so each weight row is read from memory
    once for all 16 selected rows; ``row_max`` and ``argmax`` (the first column holding the maximum) sample
    greedily. Its CPU schedule is the rule ``cpu_lm_head`` (``hand/llvm/lm_head_tp.json``): the full FLASH
    vocabulary is 17 GFLOP, too much for the unscheduled scalar loops. On CUDA, dlight's ``Fallback`` schedules
    it: every block has one loop per iterator (a K split into chunk loops here made dlight decline the kernel).
    """
    vocab = tp * vocab_shard

    @T.prim_func(s_tir=True, private=True)  # private: only the Relax main is an entry point
    def lm_head_tp(x: T.handle, w: T.Buffer((ranks, vocab_shard, hidden), "bfloat16"),
                   idx: T.Buffer((owners, MAX_LOGIT_ROWS), "int32"),
                   logits: T.Buffer((owners, MAX_LOGIT_ROWS, vocab), "float32"),
                   sampled: T.Buffer((owners, MAX_LOGIT_ROWS), "int32")):
        T.func_attr({"tir.noalias": True, "op_pattern": OPAQUE})
        n = T.int64()
        X = T.match_buffer(x, (n, hidden), "bfloat16")
        selected = T.sblock_alloc_buffer((owners, MAX_LOGIT_ROWS, hidden), "bfloat16")
        row_max = T.sblock_alloc_buffer((owners, MAX_LOGIT_ROWS), "float32")
        for o, j, k in T.grid(owners, MAX_LOGIT_ROWS, hidden):
            with T.sblock("select_rows"):
                vo, vj, vk = T.axis.remap("SSS", [o, j, k])
                T.reads(idx[vo, vj], X[0:n, vk])
                T.writes(selected[vo, vj, vk])
                selected[vo, vj, vk] = T.if_then_else(idx[vo, vj] < 0, T.bfloat16(0), X[
                    vo * (n // owners) + T.min(T.max(T.Cast("int64", idx[vo, vj]), T.int64(0)), n // owners - 1), vk])
        for v, o, j, k in T.grid(vocab, owners, MAX_LOGIT_ROWS, hidden):
            with T.sblock("logits"):
                vv, vo, vj, vk = T.axis.remap("SSSR", [v, o, j, k])
                with T.init():
                    logits[vo, vj, vv] = T.float32(0)
                logits[vo, vj, vv] = logits[vo, vj, vv] + T.Cast("float32", selected[vo, vj, vk]) * T.Cast(
                    "float32", w[vv // vocab_shard, vv % vocab_shard, vk])
        for o, j, v in T.grid(owners, MAX_LOGIT_ROWS, vocab):
            with T.sblock("row_max"):
                vo, vj, vv = T.axis.remap("SSR", [o, j, v])
                with T.init():
                    row_max[vo, vj] = T.min_value("float32")
                row_max[vo, vj] = T.max(row_max[vo, vj], logits[vo, vj, vv])
        for o, j, v in T.grid(owners, MAX_LOGIT_ROWS, vocab):
            with T.sblock("argmax"):
                vo, vj, vv = T.axis.remap("SSR", [o, j, v])
                with T.init():
                    sampled[vo, vj] = vocab
                sampled[vo, vj] = T.min(sampled[vo, vj], T.if_then_else(
                    logits[vo, vj, vv] == row_max[vo, vj], T.Cast("int32", vv), vocab))

    return lm_head_tp
