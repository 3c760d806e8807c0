"""The importer's Relax made to follow the spec: what ``from_exported_program`` emits for the goldens differs
from the contract (docs/spec.md "The torch frontend") in four places, each rewritten here by what it is, not
by which stage it comes from:

- ``torch.round`` rounds half to even; the importer emits ``R.round``, which rounds half away from zero:
  -> ``nearbyint`` (the Relax frontend's TE kernel).
- An FP32 -> BF16 ``astype`` is a rounding point, but TVM's ``BF16ComputeLegalize`` drops a
  ``cast(f32, cast(bf16, y))`` round trip once both casts are fused into one kernel: the value is put on the
  BF16 grid by integer bit arithmetic first (as the Relax frontend does), so the cast is exact.
- ``127.0 / amax``: torch computes a scalar over a tensor as ``reciprocal(amax) * 127`` (``Tensor.__rtruediv__``),
  one rounding more than the spec's FP32 divide (§1.5; an ulp apart in about a quarter of the rows), and the
  exported graph says so: ``multiply(divide(1, a), c)`` -> ``divide(c, a)``.
- A GEMM of up-cast operands (``x.float() @ w.float().T``, ``q.int() @ w.int().T``): the importer multiplies
  the widened copies, and for the INT32 one even accumulates in FP32 (``out_dtype="float32"``: inexact past
  2^24). The spec's GEMMs read the narrow operands (BF16, INT8) and accumulate in FP32 / INT32, so the matmul
  reads them directly (the widening is exact; the schedule rules then find the GEMM's twin by its operand
  dtypes), accumulates in the spec's type and casts the result as the importer's did. The cast is moved
  through ops that only move or select values (transposes, reshapes, slices, gathers, ``where`` with a
  constant the narrow type holds exactly): the LM head's golden widens the hidden state before it gathers
  the rows.

One more rewrite changes no arithmetic, only the kernels: the golden RMSNorm's chunked sum of squares (a Python
loop over 128-column slices, spec §1.3) imports as a slice, a square-sum and an add per chunk, two small kernels
per chunk; it becomes the sum over ``reshape(x, [rows, D/128, 128])`` chunks, the same additions in the same
order, as the Relax frontend writes it.
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx
from tvm.ir.expr import GenericConst  # a tensor constant (IntImm and FloatImm are Constants too)
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..ir.frontends import round_half_even, round_to_bf16
from ..support.lazy import lazy_module

torch = lazy_module("torch")

# a narrow operand dtype -> the accumulator its spec GEMM uses; an up-cast to it (or wider) is exact
ACCUMULATORS = {"bfloat16": "float32", "int8": "int32"}
_EXACT_WIDENINGS = {"bfloat16": {"float32", "float64"}, "int8": {"int16", "int32", "int64", "float32"}}
# ops that only move or select values (the data is their first argument): they commute with a cast
_MOVERS = ("relax.permute_dims", "relax.reshape", "relax.strided_slice", "relax.expand_dims", "relax.squeeze",
           "relax.index_tensor", "relax.take")


def _op(expr, name: str) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == name


def _dtype(expr) -> str:
    return str(expr.ty.dtype)


def _ints(expr) -> list[int] | None:
    fields = getattr(expr, "fields", None)
    return None if fields is None or not all(isinstance(f, tirx.IntImm) for f in fields) else [int(f) for f in fields]


def _is_scalar(expr, value: float | None = None) -> bool:
    """A 0-d tensor constant (of ``value``, if given)."""
    if not isinstance(expr, GenericConst):
        return False
    data = expr.value.numpy()
    return data.ndim == 0 and (value is None or float(data) == value)


@mutator
class _ToSpec(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.mod_ = mod

    def transform(self) -> tvm.IRModule:
        for gv, func in self.mod_.functions_items():
            if isinstance(func, relax.Function):
                self.builder_.update_func(gv, self.visit_expr(func))
        return self.builder_.get()

    def _producer(self, expr):
        return self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr

    def _narrow(self, expr, dtype: str | None = None):
        """``expr`` as the narrow tensor (of ``dtype``, if given) it exactly widens, through ops that move or
        select values, emitted; None if it is not one."""
        value = self._producer(expr)
        if isinstance(value, GenericConst) or _op(value, "relax.full"):  # a constant fits if exactly representable
            const = value if isinstance(value, GenericConst) else value.args[1]
            fill = torch.from_numpy(const.value.numpy())
            if dtype is None or fill.ndim or not torch.equal(fill.to(getattr(torch, dtype)).to(fill.dtype), fill):
                return None
            narrow = relax.const(fill.item(), dtype)
            return narrow if value is const else self.builder_.emit(relax.op.full(value.args[0], narrow, dtype))
        if _op(value, "relax.astype"):
            src = value.args[0]
            wide_enough = _dtype(expr) in _EXACT_WIDENINGS.get(_dtype(src), ())
            return src if wide_enough and dtype in (None, _dtype(src)) else None
        if any(_op(value, name) for name in _MOVERS):
            inner = self._narrow(value.args[0], dtype)
            return None if inner is None else self.builder_.emit(
                relax.Call(value.op, [inner, *value.args[1:]], value.attrs, value.ty_args))
        if _op(value, "relax.where"):
            a = self._narrow(value.args[1], dtype)
            b = None if a is None else self._narrow(value.args[2], _dtype(a))
            return None if b is None else self.builder_.emit(relax.op.where(value.args[0], a, b))
        return None

    def _matmul(self, call: relax.Call):
        a = self._narrow(call.args[0])
        b = None if a is None else self._narrow(call.args[1], _dtype(a))
        if b is None or _dtype(a) not in ACCUMULATORS:
            return call
        y = relax.op.matmul(a, b, out_dtype=ACCUMULATORS[_dtype(a)])
        out = _dtype(call)
        return y if ACCUMULATORS[_dtype(a)] == out else relax.op.astype(self.builder_.emit(y), out)

    def _scalar_over(self, call: relax.Call):
        """``multiply(divide(1, a), c)``, c a scalar constant -> ``divide(c, a)``."""
        recip, c = self._producer(call.args[0]), call.args[1]
        if _op(recip, "relax.divide") and _is_scalar(recip.args[0], 1.0) and _is_scalar(c):
            return relax.op.divide(c, recip.args[1])
        return call

    def _chunk_term(self, expr):
        """``sum(y, axis=-1, keepdims)`` of ``y = x[..., k0:k1]`` or ``y * y`` -> ``(x, squared, k0, k1)``."""
        total = self._producer(expr)
        if not (_op(total, "relax.sum") and total.attrs.keepdims and [int(a) for a in total.attrs.axis] == [-1]):
            return None
        term = self._producer(total.args[0])
        squared = _op(term, "relax.multiply") and term.args[0].same_as(term.args[1])
        piece = self._producer(term.args[0]) if squared else term
        if not _op(piece, "relax.strided_slice") or len(piece.args) < 4:
            return None
        x = piece.args[0]
        axes, begin, end = (_ints(a) for a in piece.args[1:4])
        strides = _ints(piece.args[4]) if len(piece.args) > 4 else [1]
        if None in (axes, begin, end, strides) or axes != [len(x.ty.shape) - 1] or strides != [1]:
            return None
        return x, squared, begin[0], end[0]

    def _chunked_sum(self, call: relax.Call):
        """``((0 + s(x[:, 0:c])) + s(x[:, c:2c])) + ...`` over the whole last axis, ``s`` a row sum (of squares)
        -> the sum over chunks of ``s`` of ``reshape(x, [..., n, c])``: the same additions in the same order (a
        legalised sum accumulates in order from 0), as two kernels instead of two per chunk."""
        chunks, acc = [], call
        while _op(acc, "relax.add"):
            term = self._chunk_term(acc.args[1])
            if term is None:
                return call
            chunks.append(term)
            acc = self._producer(acc.args[0])
        if not (_op(acc, "relax.full") and _is_scalar(acc.args[1], 0.0)) or not chunks:
            return call
        chunks.reverse()
        x, squared = chunks[0][:2]
        width = chunks[0][3] - chunks[0][2]
        size = x.ty.shape[-1]
        if not isinstance(size, tirx.IntImm) or any(
                not c[0].same_as(x) or c[1] != squared or c[2:] != (i * width, (i + 1) * width)
                for i, c in enumerate(chunks)) or len(chunks) * width != int(size):
            return call
        xr = self.builder_.emit(relax.op.reshape(x, [*list(x.ty.shape)[:-1], len(chunks), width]))
        term = self.builder_.emit(relax.op.multiply(xr, xr)) if squared else xr
        per_chunk = self.builder_.emit(relax.op.sum(term, axis=[-1]))
        return relax.op.sum(per_chunk, axis=[-1], keepdims=True)

    def visit_call_(self, call):
        call = self.visit_expr_post_order(call)
        if _op(call, "relax.matmul"):
            return self._matmul(call)
        if _op(call, "relax.add"):
            return self._chunked_sum(call)
        return self._scalar_over(call) if _op(call, "relax.multiply") else call


def to_spec(mod: tvm.IRModule) -> tvm.IRModule:
    """The imported module with the rewrites above (all but the rounding kernels, which ``emit_rounding`` makes in
    the module they run in), and what they orphan (widened copies, per-chunk kernels) removed."""
    return relax.transform.DeadCodeElimination()(_ToSpec(mod).transform())


def emit_rounding(bb: relax.BlockBuilder, value, hint: str):
    """Emit one binding's value into ``bb`` with the spec's rounding: ``R.round`` half to even, an FP32 -> BF16
    cast from the BF16 grid. The TE kernels are made in ``bb`` (the module they run in: a kernel made in the
    imported module would name its own symbolic row count, which FuseTIR cannot bind to ``main``'s)."""
    if _op(value, "relax.round"):
        return bb.emit_te(round_half_even, value.args[0], primfunc_name_hint="round_half_even", name_hint=hint)
    if _op(value, "relax.astype") and str(value.attrs.dtype) == "bfloat16" and _dtype(value.args[0]) == "float32":
        grid = bb.emit_te(round_to_bf16, value.args[0], primfunc_name_hint="round_to_bf16", name_hint=hint)
        return bb.emit(relax.op.astype(grid, "bfloat16"), name_hint=hint)  # exact: the value is on the grid
    return bb.emit(value, name_hint=hint)
