"""A pass plugin for the own-model tests: ``FP16NormAccumulator`` keeps the RMSNorm's mean of squares in FP16 (the
reduction of every ``R.mean`` of an FP32 tensor runs on FP16 values, its result cast back), the kind of
"save bandwidth in the norm" change that loses precision. It runs in the ``legalize`` phase, where the
``R.mean`` operators still exist."""

import tvm
from tvm import relax


@relax.expr_functor.mutator
class _FP16Mean(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.mean"
                and call.args[0].ty.dtype == "float32"):
            return call
        half = self.builder_.emit(relax.op.astype(call.args[0], "float16"))
        mean = self.builder_.emit(relax.op.mean(half, call.attrs.axis, call.attrs.keepdims))
        return relax.op.astype(mean, "float32")


@tvm.transform.module_pass(opt_level=0, name="FP16NormAccumulator")
def fp16_norm_accumulator(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            out[gv] = _FP16Mean(mod).visit_expr(func)
    return out


def passes(_target):
    return {"legalize": [fp16_norm_accumulator]}
