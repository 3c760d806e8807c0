"""A deliberately broken pass for any module file, for ``--extra-passes examples/tanh_gelu_approximation.py``.

``TanhGeluApproximation`` is a "fast GELU": it replaces every exact ``R.nn.gelu`` (erf) with the tanh
approximation before legalisation. The two differ by up to ~1e-3, far outside ``torch.testing.assert_close``'s
FP32 tolerance, so the golden check of a model with a GELU fails, and ``mtp-tvm bisect --module`` names this pass
(docs/guides/own-model.md; ``tests/test_module_file.py``).
"""

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator


@mutator
class _ToTanhGelu(PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.gelu":
            return relax.op.nn.gelu_tanh(call.args[0])  # the bug: an approximation where exact GELU was asked
        return call


@tvm.transform.module_pass(opt_level=0, name="TanhGeluApproximation")
def tanh_gelu_approximation(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    rewriter = _ToTanhGelu(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get()


def passes(_target):
    return {"legalize": [tanh_gelu_approximation]}
