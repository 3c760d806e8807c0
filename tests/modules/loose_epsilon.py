"""A pass plugin for the tolerance tests: ``LooseEpsilon`` turns every FP32 scalar constant 1e-6 (an RMSNorm's
epsilon) into 1e-3, a bug whose error (about 5e-4 of a unit-scale norm) lies inside the spec's tolerance: ``check``
passes it by default, and only a tightened tolerance (``--rtol``, ``--max-error-ratio``, ``--exact``) finds it. It
runs in the ``legalize`` phase, on the Relax operators (the Relax frontend's cases, a torch model's module)."""

import numpy as np
import tvm
from tvm import relax

EPSILON, LOOSE = 1e-6, 1e-3


def _is_epsilon(arg) -> bool:
    if not isinstance(arg, tvm.ir.expr.Constant):
        return False
    value = arg.value.numpy()
    return value.dtype == np.float32 and value.size == 1 and abs(float(value.ravel()[0]) - EPSILON) < 1e-12


@relax.expr_functor.mutator
class _Loosen(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not any(_is_epsilon(a) for a in call.args):
            return call
        args = [relax.const(np.float32(LOOSE)) if _is_epsilon(a) else a for a in call.args]  # the bug
        return relax.Call(call.op, args, call.attrs, call.ty_args)


@tvm.transform.module_pass(opt_level=0, name="LooseEpsilon")
def loose_epsilon(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            out[gv] = _Loosen(mod).visit_expr(func)
    return out


def passes(_target):
    return {"legalize": [loose_epsilon]}
