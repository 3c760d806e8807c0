"""The importer's Relax made to follow the spec: what ``from_exported_program`` emits for the goldens differs
from the contract (docs/spec.md "The torch frontend") in three places, each rewritten here by what it is, not
by which stage it comes from:

- ``torch.round`` rounds half to even; the importer emits ``R.round``, which rounds half away from zero:
  -> ``nearbyint`` (the Relax frontend's TE kernel).
- An FP32 -> BF16 ``astype`` is a rounding point, but TVM's ``BF16ComputeLegalize`` drops a
  ``cast(f32, cast(bf16, y))`` round trip once both casts are fused into one kernel: the value is put on the
  BF16 grid by integer bit arithmetic first (as the Relax frontend does), so the cast is exact.
- A GEMM of up-cast operands (``x.float() @ w.float().T``, ``q.int() @ w.int().T``): the importer multiplies
  the widened copies, and for the INT32 one even accumulates in FP32 (``out_dtype="float32"``: inexact past
  2^24). The spec's GEMMs read the narrow operands (BF16, INT8) and accumulate in FP32 / INT32, so the matmul
  reads them directly (the widening is exact; the schedule rules then find the GEMM's twin by its operand
  dtypes), accumulates in the spec's type and casts the result as the importer's did. A rank-3 activation
  times a 2-D weight becomes one 2-D GEMM between reshapes (the CPU GEMM pattern is 2-D).
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..ir.frontends import round_half_even, round_to_bf16

# a narrow operand dtype -> the accumulator its spec GEMM uses; an up-cast to it (or wider) is exact
ACCUMULATORS = {"bfloat16": "float32", "int8": "int32"}
_EXACT_WIDENINGS = {"bfloat16": {"float32", "float64"}, "int8": {"int16", "int32", "int64", "float32"}}
_LAYOUT_OPS = ("relax.permute_dims", "relax.reshape")  # they move values: they commute with a cast


def _op(expr, name: str) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == name


def _dtype(expr) -> str:
    return str(expr.ty.dtype)


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

    def _narrow(self, expr):
        """``expr`` as the narrow tensor it exactly widens (through layout ops), emitted; None if it is not."""
        value = self._producer(expr)
        if _op(value, "relax.astype"):
            src = value.args[0]
            return src if _dtype(expr) in _EXACT_WIDENINGS.get(_dtype(src), ()) else None
        if any(_op(value, name) for name in _LAYOUT_OPS):
            inner = self._narrow(value.args[0])
            if inner is None:
                return None
            return self.builder_.emit(relax.Call(value.op, [inner, *value.args[1:]], value.attrs, value.ty_args))
        return None

    def _matmul(self, call: relax.Call):
        a, b = self._narrow(call.args[0]), self._narrow(call.args[1])
        if a is None or b is None or _dtype(a) != _dtype(b) or _dtype(a) not in ACCUMULATORS:
            return call
        out = _dtype(call)
        a_shape = list(a.ty.shape)
        flat = len(a_shape) == 3 and len(b.ty.shape) == 2
        if flat:
            a = self.builder_.emit(relax.op.reshape(a, [a_shape[0] * a_shape[1], a_shape[2]]))
        y = relax.op.matmul(a, b, out_dtype=ACCUMULATORS[_dtype(a)])
        if flat:
            y = relax.op.reshape(self.builder_.emit(y), [*a_shape[:2], b.ty.shape[1]])
        return y if ACCUMULATORS[_dtype(a)] == out else relax.op.astype(self.builder_.emit(y), out)

    def visit_call_(self, call):
        call = self.visit_expr_post_order(call)
        return self._matmul(call) if _op(call, "relax.matmul") else call


def narrow_gemms(mod: tvm.IRModule) -> tvm.IRModule:
    """The imported module with its GEMMs on the narrow operands, the widened copies they orphan removed."""
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
