"""Two frontends, one interface: every stage of the tail as Relax operators or as hand-written TensorIR.

``model.py`` composes stages through this interface only, so a case is built identically in both frontends
and the golden tests exercise each. All tensors here are token-padded: ``rows`` = ceil16(T).
"""

from __future__ import annotations

from tvm import relax, te, tirx

from ..contract.presets import (
    INT8_AMAX_EPS,
    INT8_SCALE_MAX,
    K_CHUNK,
    MAX_LOGIT_ROWS,
    Shapes,
)
from ..ir import tir_kernels as kernels

R = relax.op


def _tensor(shape, dtype: str) -> relax.TensorType:
    return relax.TensorType(shape, dtype)


class TIRFrontend:
    """Hand-written TVMScript kernels (``tir_kernels.py``) called through ``call_tir``. The GEMMs take the token
    count T and run ceil(T / 16) * 16 rows, which the schedule phase cuts to its tile's."""

    name = "tir"

    def __init__(self, bb: relax.BlockBuilder, tokens):
        self.bb, self.tokens = bb, tokens

    def call(self, func, name: str, args, out_ty, hint: str):
        gv = self.bb.add_func(func, name)  # structurally equal kernels are added once
        return self.bb.emit(relax.call_tir(gv, args, out_ty), name_hint=hint)

    def _token_count(self) -> relax.PrimValue:
        """T, the ``tokens`` argument of a GEMM kernel."""
        t = self.tokens
        return relax.prim_value(tirx.IntImm("int64", t) if isinstance(t, int) else t)

    def pad_rows(self, x, rows, cols: int, dtype: str, hint: str):
        return self.call(kernels.pad_rows(cols, dtype), "pad_rows_" + dtype, [x], _tensor((rows, cols), dtype), hint)

    def unpad_rows(self, xp, tokens, cols: int, dtype: str, hint: str):
        return self.call(kernels.unpad_rows(cols, dtype), "unpad_rows_" + dtype, [xp],
                         _tensor((tokens, cols), dtype), hint)

    def projection(self, hidden, prev, w: dict, rows, d: int, eps: float):
        qs = {}
        for tag, x in (("h", hidden), ("p", prev)):
            norm_w, smooth = (w["enorm_w"], w["e_proj_smooth"]) if tag == "h" else (w["hnorm_w"], w["h_proj_smooth"])
            y = self.call(kernels.rms_norm_smooth(d, eps), "rms_norm_smooth", [x, norm_w, smooth],
                          _tensor((rows, d), "bfloat16"), f"normed_{tag}")
            qs[tag] = self.call(kernels.quantize_rows(d), "quantize_rows", [y],
                                [_tensor((rows, d), "int8"), _tensor((rows,), "float32")], f"quant_{tag}")
        bb = self.bb
        q_h, s_h = bb.emit(relax.TupleGetItem(qs["h"], 0)), bb.emit(relax.TupleGetItem(qs["h"], 1))
        q_p, s_p = bb.emit(relax.TupleGetItem(qs["p"], 0)), bb.emit(relax.TupleGetItem(qs["p"], 1))
        return self.call(kernels.w8a8_dual_gemm(d), "w8a8_dual_gemm",
                         [q_h, q_p, w["e_proj_w"], w["h_proj_w"], s_h, s_p, w["e_proj_w_scale"], w["h_proj_w_scale"],
                          self._token_count()], _tensor((rows, d), "bfloat16"), "projected")

    def norm(self, x, gain, rows, d: int, eps: float):
        return self.call(kernels.rms_norm(d, eps), "rms_norm", [x, gain], _tensor((rows, d), "bfloat16"), "normed")

    def logits(self, x, weight, rows, d: int, vocab_shard: int):
        return self.call(kernels.lm_head_logits(d, vocab_shard), "lm_head_logits", [x, weight, self._token_count()],
                         _tensor((rows, vocab_shard), "float32"), "logits_padded")

    def lm_head(self, hidden, weight, row_indices, s: Shapes):
        """``[T, D]`` hidden -> ``[logits, sampled_ids]`` through one hand kernel."""
        func = kernels.lm_head_tp(s.hidden, s.vocab_shard, s.tp, s.ranks, s.owners)
        out = self.call(func, "lm_head_tp", [hidden, weight, row_indices],
                        [_tensor((s.owners, MAX_LOGIT_ROWS, s.vocab), "float32"),
                         _tensor((s.owners, MAX_LOGIT_ROWS), "int32")], "lm_head")
        return [self.bb.emit(relax.TupleGetItem(out, i), name_hint=n) for i, n in enumerate(("logits", "sampled_ids"))]


def _te_pad_rows(x, rows):
    return te.compute((rows, x.shape[1]), lambda i, k: tirx.if_then_else(
        i < x.shape[0], x[i, k], tirx.const(0, x.dtype)), name="pad_rows")


def _te_unpad_rows(xp, tokens):
    return te.compute((tokens, xp.shape[1]), lambda i, k: xp[i, k], name="unpad_rows")


def round_to_bf16(x):
    """FP32 -> FP32 on the BF16 grid, round-to-nearest-even, by integer bit arithmetic.

    TVM's BF16ComputeLegalize promotes BF16 buffers *inside* a kernel to FP32 and drops the
    ``cast(f32, cast(bf16, y))`` round trip, so once FuseOps puts the norm and the quantiser in one kernel a
    plain ``astype`` no longer rounds (spec §1.4 requires it to). Bit arithmetic cannot be folded away.
    """

    def rounded(*i):
        v = x(*i)
        bits = tirx.reinterpret("uint32", v)
        lsb = (bits >> tirx.const(16, "uint32")) & tirx.const(1, "uint32")
        grid = (bits + tirx.const(0x7FFF, "uint32") + lsb) & tirx.const(0xFFFF0000, "uint32")
        return tirx.Select(v != v, v, tirx.reinterpret("float32", grid))  # NaN stays NaN

    return te.compute(x.shape, rounded, name="round_to_bf16")


def _te_select_rows(x, row_indices, owners: int):
    """``[owners*rows, D]`` -> ``[owners, 8, D]``: each owner's indexed rows, -1 a zero row, others clamped."""
    rows = x.shape[0] // owners

    def select(o, j, k):
        i = row_indices[o, j]
        r = tirx.min(tirx.max(i.astype("int64"), tirx.const(0, "int64")), rows - 1)
        return tirx.if_then_else(i < 0, tirx.const(0, x.dtype), x[o * rows + r, k])

    return te.compute((owners, row_indices.shape[1], x.shape[1]), select, name="select_rows")


def round_half_even(x):
    return te.compute(x.shape, lambda *i: tirx.nearbyint(x(*i)), name="round_half_even")


class RelaxFrontend:
    """Relax operators, legalised and fused by TVM; TE only where Relax lacks the operator (row padding with
    a symbolic pad amount, unpadding as a kernel of its own (see ``unpad_rows``), the LM head's row gather
    clamped into a symbolic row count, and half-to-even rounding: ``R.round`` rounds half away from zero)."""

    name = "relax"

    def __init__(self, bb: relax.BlockBuilder, tokens=None):
        self.bb = bb  # legalised operators run every padded row: ``tokens`` is the TIR frontend's

    def emit(self, expr, hint: str):
        return self.bb.emit(expr, name_hint=hint)

    def const(self, value: float, dtype: str = "float32"):
        return relax.const(value, dtype)

    def pad_rows(self, x, rows, cols: int, dtype: str, hint: str):
        return self.bb.emit_te(_te_pad_rows, x, rows, primfunc_name_hint="pad_rows", name_hint=hint)

    def unpad_rows(self, xp, tokens, cols: int, dtype: str, hint: str):
        # A kernel of its own, as the TIR frontend's: ``R.strided_slice`` with a symbolic end either shapes its
        # result with ``if_then_else`` (which LiftTransformParams cannot copy) or, in bound, fuses into the GEMM
        # before it, where TVM cannot prove the GEMM's trimmed rows (``schedule.patterns``) cover the slice.
        return self.bb.emit_te(_te_unpad_rows, xp, tokens, primfunc_name_hint="unpad_rows",
                               primfunc_attrs={"op_pattern": kernels.OPAQUE}, name_hint=hint)

    def _rms_norm(self, x, gains, rows, d: int, eps: float, hint: str):
        """``bf16(x * inv * g0 * g1 ...)`` with the chunked sum of squares as two ordered reductions."""
        xf = self.emit(R.astype(x, "float32"), f"{hint}_f32")
        xc = R.reshape(xf, relax.ShapeExpr([rows, d // K_CHUNK, K_CHUNK]))
        sq_chunk = self.emit(R.sum(R.multiply(xc, xc), axis=[2]), f"{hint}_sumsq_chunk")
        sq = R.sum(sq_chunk, axis=[1], keepdims=True)
        inv = self.emit(R.rsqrt(R.add(R.multiply(sq, self.const(1.0 / d)), self.const(eps))), f"{hint}_inv_rms")
        y = R.multiply(xf, inv)
        for g in gains:
            y = R.multiply(y, g)
        y = self.bb.emit_te(round_to_bf16, self.emit(y, f"{hint}_f32_out"), primfunc_name_hint="round_to_bf16")
        return self.emit(R.astype(y, "bfloat16"), hint)  # exact: y is on the BF16 grid already

    def _quantize_rows(self, y, hint: str):
        yf = self.emit(R.astype(y, "float32"), f"{hint}_f32")
        amax = R.maximum(R.max(R.abs(yf), axis=[1], keepdims=True), self.const(INT8_AMAX_EPS))
        scale_q = self.emit(R.divide(self.const(INT8_SCALE_MAX), amax), f"{hint}_scale_q")
        scale_dq = self.emit(R.divide(self.const(1.0), scale_q), f"{hint}_scale_dq")
        rounded = self.bb.emit_te(round_half_even, self.emit(R.multiply(yf, scale_q), f"{hint}_scaled"),
                                  primfunc_name_hint="round_half_even")
        q = R.astype(R.astype(R.astype(rounded, "int32"), "float16"), "int8")
        return self.emit(q, hint), scale_dq

    def _w8a8_linear(self, q, scale_dq, wq, w_scale):
        acc = R.matmul(q, R.permute_dims(wq, [1, 0]), out_dtype="int32")
        return R.multiply(R.multiply(R.astype(acc, "float32"), scale_dq), w_scale)

    def projection(self, hidden, prev, w: dict, rows, d: int, eps: float):
        h = self._rms_norm(hidden, [w["enorm_w"], w["e_proj_smooth"]], rows, d, eps, "normed_h")
        p = self._rms_norm(prev, [w["hnorm_w"], w["h_proj_smooth"]], rows, d, eps, "normed_p")
        q_h, s_h = self._quantize_rows(h, "quant_h")
        q_p, s_p = self._quantize_rows(p, "quant_p")
        out = R.add(self._w8a8_linear(q_h, s_h, w["e_proj_w"], w["e_proj_w_scale"]),
                    self._w8a8_linear(q_p, s_p, w["h_proj_w"], w["h_proj_w_scale"]))
        return self.emit(R.astype(out, "bfloat16"), "projected")

    def norm(self, x, gain, rows, d: int, eps: float):
        return self._rms_norm(x, [gain], rows, d, eps, "normed")

    def logits(self, x, weight, rows, d: int, vocab_shard: int):
        return self.emit(R.matmul(x, R.permute_dims(weight, [1, 0]), out_dtype="float32"), "logits_padded")

    def lm_head(self, hidden, weight, row_indices, s: Shapes):
        """Gather the selected rows, multiply with one copy of each shard (ranks ``0..tp-1``), take the argmax."""
        selected = self.bb.emit_te(_te_select_rows, hidden, row_indices, s.owners, primfunc_name_hint="select_rows",
                                   name_hint="selected_rows")
        shards = R.strided_slice(weight, axes=[0], begin=[0], end=[s.tp])
        full = self.emit(R.reshape(shards, (s.vocab, s.hidden)), "lm_head_full_weight")
        rows = R.reshape(selected, (s.owners * MAX_LOGIT_ROWS, s.hidden))  # one 2-D GEMM: the CPU GEMM pattern
        flat = R.matmul(rows, R.permute_dims(full, [1, 0]), out_dtype="float32")
        logits = self.emit(R.reshape(flat, (s.owners, MAX_LOGIT_ROWS, s.vocab)), "logits")
        return [logits, self.emit(R.astype(R.argmax(logits, axis=-1), "int32"), "sampled_ids")]

