"""A TVMScript module for ``mtp-tvm check --module examples/tvmscript_module.py``: a Relax ``main`` written by
hand (a GEMM with bias, ReLU, and a row-wise RMS norm), its token count symbolic.

The contract of a module file of this kind: ``module()`` returns the ``tvm.IRModule`` (a Relax function
``main``), ``example_inputs()`` the numpy arrays it runs on. The check is differential: the reference is the
same module built with no schedule and no optional pass. ``main``'s ``num_input`` attribute says how many
leading inputs are activations; the rest are weights (packed once, as a case's).
"""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R

HIDDEN, OUT = 64, 128


@I.ir_module
class Mlp:
    @R.function
    def main(x: R.Tensor(("n", HIDDEN), "float32"), w: R.Tensor((OUT, HIDDEN), "float32"),
             b: R.Tensor((OUT,), "float32")):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            h = R.nn.relu(R.add(R.matmul(x, R.permute_dims(w)), b))
            ms = R.mean(R.multiply(h, h), axis=[1], keepdims=True)
            y = R.multiply(h, R.rsqrt(R.add(ms, R.const(1e-6, "float32"))))
            R.output(y)
        return y


def module():
    return Mlp


def example_inputs():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((8, HIDDEN), dtype=np.float32),
            rng.standard_normal((OUT, HIDDEN), dtype=np.float32) / 8,
            rng.standard_normal((OUT,), dtype=np.float32))
